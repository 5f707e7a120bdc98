//! Making untrusted text safe to show. Stage names, tags, host names, session
//! ids and event payloads come from ranks (or from files anyone could have
//! written): one function makes them safe for a terminal, one for a CSV cell.

use std::borrow::Cow;

use unicode_width::UnicodeWidthChar;

/// Whether `c` could move the cursor, recolour or reorder what a terminal
/// shows: C0 and C1 control characters (escape sequences begin with one)
/// and the Unicode bidirectional overrides.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character that could drive a terminal replaced by `?`.
pub fn terminal(text: &str) -> Cow<'_, str> {
    replace_unsafe(text, |_| true)
}

/// A rendered page with the characters HTML cannot carry (controls other
/// than line breaks and tabs) or that could reorder its text replaced by `?`.
pub fn markup(page: &str) -> Cow<'_, str> {
    replace_unsafe(page, |c| !matches!(c, '\n' | '\r' | '\t'))
}

/// `text` with each [`is_unsafe`] character that `replaced` accepts made `?`.
fn replace_unsafe(text: &str, replaced: impl Fn(char) -> bool) -> Cow<'_, str> {
    let bad = |c: char| is_unsafe(c) && replaced(c);
    if text.chars().any(bad) {
        Cow::Owned(text.chars().map(|c| if bad(c) { '?' } else { c }).collect())
    } else {
        Cow::Borrowed(text)
    }
}

/// The columns `c` takes in a terminal (Unicode's East Asian Width: 2 for
/// wide characters and emoji, 0 for combining marks and controls).
fn char_width(c: char) -> usize {
    UnicodeWidthChar::width(c).unwrap_or(0)
}

/// The columns `text` takes in a terminal.
pub fn width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

/// [`terminal`] text cut to `width` columns (ending in `…` when cut), for
/// an aligned table.
pub fn cell(text: &str, width: usize) -> String {
    let clean = terminal(text);
    if self::width(&clean) <= width {
        return clean.into_owned();
    }
    let mut cut = String::new();
    let mut used = 0;
    for c in clean.chars() {
        if used + char_width(c) + 1 > width {
            break;
        }
        used += char_width(c);
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// [`cell`] padded with spaces to exactly `width` columns: a column of an
/// aligned table whose text may hold wide characters (which `format!`'s
/// padding counts as one).
pub fn column(text: &str, width: usize) -> String {
    let mut cell = cell(text, width);
    let used = self::width(&cell);
    cell.extend(std::iter::repeat_n(' ', width.saturating_sub(used)));
    cell
}

/// A CSV field (RFC 4180): control characters replaced by `?`, prefixed
/// with `'` when a spreadsheet would read it as a formula (a leading `=`,
/// `+`, `-`, `@`, tab or carriage return, after any spaces, which
/// spreadsheets trim), quoted when it holds a comma, quote or line break.
pub fn csv_field(text: &str) -> String {
    let formula = text
        .trim_start_matches(' ')
        .starts_with(['=', '+', '-', '@', '\t', '\r']);
    let clean: String = text
        .chars()
        .map(|c| if is_unsafe(c) && c != '\n' { '?' } else { c })
        .collect();
    let text = if formula { format!("'{clean}") } else { clean };
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// Ranks in a few characters: `[0, 1, 2, 5]` as `0-2, 5`.
pub fn rank_ranges(ranks: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &rank in ranks {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(rank) => *end = rank,
            _ => runs.push((rank, rank)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    parts.join(", ")
}

/// [`terminal`] text broken into lines of at most `width` characters at
/// spaces (a word longer than a line is cut), every line after the first
/// indented by `indent` spaces (at most `width` − 1); no line break at the
/// end. A `width` of 0 leaves the text on one line.
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let clean = terminal(text);
    if width == 0 {
        return clean.into_owned();
    }
    let indent = indent.min(width - 1);
    // Leading spaces are kept: they indent the first line.
    let words = clean.trim_start_matches(' ');
    let mut line_len = clean.len() - words.len();
    let mut out = " ".repeat(line_len);
    // Whether the line holds a word yet (a space goes before the next).
    let mut started = false;
    for word in words.split(' ').filter(|w| !w.is_empty()) {
        let mut word: &str = word;
        loop {
            let len = self::width(word);
            if started && line_len + 1 + len <= width {
                out.push(' ');
                out.push_str(word);
                line_len += 1 + len;
                break;
            }
            if started {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
                line_len = indent;
            }
            started = true;
            let room = width.saturating_sub(line_len).max(1);
            if len <= room {
                out.push_str(word);
                line_len += len;
                break;
            }
            // A word longer than a line: as much as fits (at least one
            // character), the rest next.
            let mut split = 0;
            let mut used = 0;
            for (i, c) in word.char_indices() {
                if split > 0 && used + char_width(c) > room {
                    break;
                }
                used += char_width(c);
                split = i + c.len_utf8();
            }
            out.push_str(&word[..split]);
            line_len += used;
            word = &word[split..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_wide_characters_twice() {
        assert_eq!(width("vae_decode"), 10);
        assert_eq!(width("画像生成"), 8);
        assert_eq!(width("e\u{301}"), 1, "a combining accent takes no column");
        assert_eq!(width("🚀"), 2);
        assert_eq!(width("नमस्ते"), 4, "Devanagari vowel signs take no column");
        assert_eq!(column("画像生成", 10), "画像生成  ");
        // A wide character does not fit the column left before the `…`.
        assert_eq!(cell("画像生成ステージ", 10), "画像生成…");
        assert_eq!(column("画像生成ステージ", 10), "画像生成… ");
        assert_eq!(column("ab", 4), "ab  ");
        assert_eq!(cell("abcdef", 4), "abc…");
    }

    #[test]
    fn wrap_counts_columns() {
        assert_eq!(wrap("画像 生成段階", 6, 0), "画像\n生成段\n階");
    }

    #[test]
    fn wrap_breaks_at_spaces_indents_and_cuts_long_words() {
        assert_eq!(wrap("aa bb cc dd", 5, 2), "aa bb\n  cc\n  dd");
        assert_eq!(wrap("short", 80, 4), "short");
        assert_eq!(wrap("  lead ing", 7, 4), "  lead\n    ing");
        assert_eq!(wrap("abcdefghij", 4, 1), "abcd\n efg\n hij");
        assert_eq!(wrap("abcdef", 2, 4), "ab\n c\n d\n e\n f", "indent clamped");
        assert_eq!(wrap("a b", 0, 4), "a b", "width 0: no wrapping");
        assert_eq!(wrap("a\u{1b}[2Jb c", 80, 0), "a?[2Jb c");
        for line in wrap(&"word ".repeat(100), 30, 4).lines() {
            assert!(line.chars().count() <= 30, "{line:?}");
        }
    }

    #[test]
    fn ranks_in_ranges() {
        assert_eq!(rank_ranges(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        assert_eq!(rank_ranges(&[]), "");
    }

    #[test]
    fn escape_sequences_and_bidi_overrides_never_reach_a_terminal() {
        assert_eq!(terminal("a\x1b[31mb\n"), "a?[31mb?");
        assert_eq!(terminal("\u{9b}2J"), "?2J", "the C1 form of an escape");
        assert_eq!(terminal("evil\u{202e}txt.exe"), "evil?txt.exe");
        assert!(matches!(terminal("vae_decode"), Cow::Borrowed(_)));
        assert_eq!(cell("abcdefgh", 5), "abcd…");
        assert_eq!(cell("short", 5), "short");
    }

    #[test]
    fn hostile_csv_fields_are_quoted_and_defused() {
        assert_eq!(csv_field("vae_decode"), "vae_decode");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\"\n"), "\"say \"\"hi\"\"\n\"");
        for formula in ["=cmd()", "+1", "-1", "@SUM(A1)"] {
            assert_eq!(csv_field(formula), format!("'{formula}"));
        }
        assert_eq!(csv_field("\t=cmd()"), "'?=cmd()");
        assert_eq!(csv_field("\r=cmd()"), "'?=cmd()");
        assert_eq!(
            csv_field("  =1+1"),
            "'  =1+1",
            "spaces that a spreadsheet trims"
        );
        assert_eq!(csv_field("a\x1b[2Jb"), "a?[2Jb");
    }
}
