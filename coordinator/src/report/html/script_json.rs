//! JSON that can sit inside a `<script>` element, for the page's data block.

use std::io::Write;

use serde::Serialize;
use serde_json::ser::Formatter;

/// Writes `value` as JSON that can sit inside a `<script>` element: `<`,
/// `>` and `&` (so no `</script>` or `<!--` can appear) and the line
/// separators U+2028/U+2029 written as `\u` escapes, which JSON reads back
/// as the same characters.
pub fn write_script_json(value: &impl Serialize, out: &mut impl Write) -> std::io::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(out, ScriptSafe);
    value
        .serialize(&mut serializer)
        .map_err(std::io::Error::other)
}

/// serde_json's compact formatter, but escaping what [`write_script_json`]
/// promises inside strings (keys included), where a `\u` escape means the
/// same. The characters escaped only ever occur inside JSON strings; the
/// escapes serde_json makes itself (`"`, `\\`, control characters) are
/// written as it writes them.
struct ScriptSafe;

impl Formatter for ScriptSafe {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escape = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(escape.as_bytes())?;
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_json_cannot_close_the_script_element() {
        let hostile = "</script><script>window.pwned=1</script><!-- & \u{2028}\u{2029} é \u{2027}";
        let mut json = Vec::new();
        write_script_json(&hostile, &mut json).unwrap();
        let json = String::from_utf8(json).unwrap();
        for forbidden in ["<", ">", "&", "\u{2028}", "\u{2029}"] {
            assert!(!json.contains(forbidden), "{forbidden:?} in {json}");
        }
        let back: String = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back, hostile,
            "JSON reads the escapes back as the same text"
        );
    }
}
