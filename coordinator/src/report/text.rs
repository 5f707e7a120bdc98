//! Making untrusted strings (stage names, tags) safe to show.

/// `text` with control characters replaced, cut to `width` characters
/// (ending in `…` when cut), for an aligned terminal table.
pub fn cell(text: &str, width: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if clean.chars().count() <= width {
        clean
    } else {
        let mut cut: String = clean.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_long_names_are_tamed() {
        assert_eq!(cell("a\x1b[31mb\n", 20), "a?[31mb?");
        assert_eq!(cell("abcdefgh", 5), "abcd…");
        assert_eq!(cell("short", 5), "short");
    }
}
