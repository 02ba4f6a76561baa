//! What halcyon reads of PTX text: the kernels it defines (`.entry`), each kernel's `.param`
//! list and the size of each parameter, with comments removed and string literals kept whole
//! as the compiler reads them; and the checks of PTX text made on every load (see the
//! [module docs](super)).

use halcyon::{EntryPoint, Error, Result, StatusCode};

use super::signature::match_params;
use super::{invalid, is_binary_image};

pub(super) fn looks_like_ptx(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    text.contains(".version") || text.contains(".target") || text.contains(".entry")
}

/// The names of the kernels (`.entry` directives) a PTX text defines, in order.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    // Comments removed; a name may follow `.entry` on the next line.
    let code = strip_ptx_comments(ptx);
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        rest = &rest[at + ".entry".len()..];
        if !before_ok || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '%'))
            .collect();
        if !name.is_empty() && !name.starts_with('.') {
            names.push(name);
        }
    }
    names
}

/// The size in bytes of each parameter of the kernel `name` (its `.entry`'s `.param` list), in
/// order; `None` if the PTX defines no such kernel. A parameter of a type or array size the
/// parser does not know counts as 0 bytes, and one whose size overflows `usize` as
/// `usize::MAX`: either then matches no signature halcyon passes.
pub fn ptx_param_sizes(ptx: &str, name: &str) -> Option<Vec<usize>> {
    let params = ptx_params(ptx, name)?;
    Some(
        params
            .iter()
            .map(|(_, size)| size.unwrap_or(usize::MAX))
            .collect(),
    )
}

/// Each parameter declaration of the kernel `name`, with its size in bytes (`None` where the
/// size overflows); `None` if the PTX defines no such kernel.
fn ptx_params(ptx: &str, name: &str) -> Option<Vec<(String, Option<usize>)>> {
    let code = strip_ptx_comments(ptx);
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        rest = &rest[at + ".entry".len()..];
        if !before_ok || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let after = rest.trim_start();
        let Some(tail) = after.strip_prefix(name) else {
            continue;
        };
        if tail
            .starts_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '%'))
        {
            continue; // a longer name
        }
        let tail = tail.trim_start();
        let Some(list) = tail.strip_prefix('(') else {
            return Some(Vec::new()); // `.entry name` without a parameter list
        };
        let list = &list[..list.find(')').unwrap_or(list.len())];
        return Some(
            list.split(',')
                .filter(|param| !param.trim().is_empty())
                .map(|param| {
                    (
                        param.split_whitespace().collect::<Vec<_>>().join(" "),
                        ptx_param_size(param),
                    )
                })
                .collect(),
        );
    }
    None
}

/// `ptx` with each `//` and `/* */` comment replaced by a space (the line ends inside a block
/// comment kept, so that line numbers stay). See [`lex_ptx`].
pub(super) fn strip_ptx_comments(ptx: &str) -> String {
    lex_ptx(ptx).0
}

/// `ptx` without its comments, and the byte offset of the first string literal that a
/// backslash continues past its line's end, if any. String literals (PTX has them in `.file`
/// directives) are kept whole, as the compiler reads them: a `/*` or `//` in a file name
/// starts no comment, so this reader never takes text for code that the compiler skips, or
/// the other way round. A string ends at its closing quote or its line's end; a backslash in
/// it escapes the next character. Whether a compiler would continue a string onto the next
/// line is not documented, so [`validate_ptx`] refuses a text that asks for it.
fn lex_ptx(ptx: &str) -> (String, Option<usize>) {
    let bytes = ptx.as_bytes();
    let mut code = String::with_capacity(ptx.len());
    let mut continued = None;
    // `from..` is code not yet copied; every cut is at an ASCII byte.
    let (mut at, mut from) = (0, 0);
    while at < bytes.len() {
        let end = match (bytes[at], bytes.get(at + 1)) {
            (b'"', _) => {
                at += 1;
                while at < bytes.len() && !matches!(bytes[at], b'"' | b'\n' | b'\r') {
                    if bytes[at] == b'\\' {
                        if matches!(bytes.get(at + 1), Some(b'\n' | b'\r')) {
                            continued.get_or_insert(at);
                            break;
                        }
                        at += 1;
                    }
                    at += 1;
                }
                at += 1;
                continue;
            }
            (b'/', Some(b'/')) => ptx[at..].find('\n').map_or(ptx.len(), |end| at + end),
            (b'/', Some(b'*')) => ptx[at + 2..]
                .find("*/")
                .map_or(ptx.len(), |end| at + end + 4),
            _ => {
                at += 1;
                continue;
            }
        };
        code.push_str(&ptx[from..at]);
        code.push(' ');
        code.extend(ptx[at..end].chars().filter(|&c| c == '\n'));
        (at, from) = (end, end);
    }
    code.push_str(&ptx[from..]);
    (code, continued)
}

/// The size of one `.param` declaration: `.param .u64 name`, `.param .u64 .ptr .global .align 4
/// name`, `.param .align 8 .b8 name[16]` (whitespace may stand inside the brackets, and an
/// array may have several dimensions, `name[2][3]`), `.param .v2 .u32 name`. A type or an
/// array size it does not know is 0 bytes; `None` if the size overflows.
fn ptx_param_size(param: &str) -> Option<usize> {
    let (declaration, dimensions) = match param.split_once('[') {
        Some((declaration, dimensions)) => (declaration, Some(dimensions)),
        None => (param, None),
    };
    let tokens: Vec<&str> = declaration.split_whitespace().collect();
    let element = tokens.iter().find_map(|t| match *t {
        ".u8" | ".s8" | ".b8" => Some(1usize),
        ".u16" | ".s16" | ".b16" | ".f16" => Some(2),
        ".u32" | ".s32" | ".b32" | ".f32" => Some(4),
        ".u64" | ".s64" | ".b64" | ".f64" => Some(8),
        _ => None,
    });
    let lanes = tokens.iter().find_map(|t| match *t {
        ".v2" => Some(2usize),
        ".v4" => Some(4),
        ".v8" => Some(8),
        _ => None,
    });
    let mut size = element.unwrap_or(0).checked_mul(lanes.unwrap_or(1))?;
    let Some(dimensions) = dimensions else {
        return Some(size);
    };
    // `16]`, `2 ]`, ` 2][3]`: each a decimal count, then `]`, then `[` before the next.
    let mut rest = dimensions;
    loop {
        let Some((count, tail)) = rest.split_once(']') else {
            return Some(0);
        };
        let Ok(count) = count.trim().parse::<usize>() else {
            return Some(0);
        };
        size = size.checked_mul(count)?;
        let tail = tail.trim_start();
        if tail.is_empty() {
            return Some(size);
        }
        let Some(tail) = tail.strip_prefix('[') else {
            return Some(0);
        };
        rest = tail;
    }
}

/// Whether the PTX kernel of `entry` takes a status word after its constants (see the
/// [module docs](super)), from its `.param` list: `b` 8-byte pointers then `c` 4-byte values
/// is `false`, followed by one more 8-byte pointer is `true`; anything else is
/// `InvalidArgument`, as is a PTX without the kernel.
pub fn ptx_status_word(ptx: &str, entry: &EntryPoint) -> Result<bool> {
    let params = ptx_params(ptx, &entry.name).ok_or_else(|| {
        invalid(format!(
            "the PTX defines no kernel '{}' whose parameters could be checked",
            entry.name
        ))
    })?;
    let mut sizes = Vec::with_capacity(params.len());
    for (declaration, size) in params {
        sizes.push(size.ok_or_else(|| {
            invalid(format!(
                "kernel '{}' declares the parameter `{declaration}`, whose size in bytes \
                 overflows (element size times count); no kernel can take it",
                entry.name
            ))
        })?);
    }
    match_params(entry, &sizes)
}

pub(super) fn validate_ptx(text: &str, entry_points: &[EntryPoint]) -> Result<()> {
    // cuModuleLoadData tells PTX from a cubin or fatbin by its content: text starting with the
    // ELF magic would be read as a cubin. (A fatbin's magic, 50 ed 55 ba, is not UTF-8.)
    if is_binary_image(text.as_bytes()) {
        return Err(invalid(
            "the PTX text starts with the ELF magic (7f 45 4c 46 at byte offset 0): the driver \
             would read it as a cubin, not as PTX; a cubin enters through the unsafe \
             CudaModule::binary",
        ));
    }
    let control = text
        .bytes()
        .position(|b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || b == 0x7f);
    if let Some(at) = control {
        let byte = text.as_bytes()[at];
        if byte == 0 {
            // cuModuleLoadData reads PTX up to its NUL: anything after an inner one is lost.
            return Err(invalid(format!(
                "PTX text contains a NUL byte at offset {at}; PTX is text without NULs"
            )));
        }
        return Err(invalid(format!(
            "PTX text contains the control byte 0x{byte:02x} at byte offset {at}; PTX is text \
             whose only control characters are tab, line feed and carriage return"
        )));
    }
    if text.trim().is_empty() {
        return Err(invalid("the PTX text is empty"));
    }
    let (code, continued) = lex_ptx(text);
    if let Some(at) = continued {
        return Err(invalid(format!(
            "the PTX text continues a string literal past its line's end (a backslash ending \
             line {}); halcyon reads kernel parameters from the text and does not guess how a \
             compiler joins such lines: write the string on one line",
            text.as_bytes()[..at]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1
        )));
    }
    // ptxas refuses preprocessor directives (`#define` is a syntax error to it), and halcyon
    // reads each kernel's `.param` list from the text as written: refusing them here keeps the
    // text checked the text compiled, should some JIT preprocess PTX.
    if let Some((line, _)) = code
        .lines()
        .enumerate()
        .find(|(_, line)| line.trim_start().starts_with('#'))
    {
        return Err(invalid(format!(
            "the PTX text has a preprocessor directive on line {}; PTX is not preprocessed, so \
             expand it first (e.g. `cpp -P`)",
            line + 1
        )));
    }
    let entries = ptx_entries(text);
    for entry in entry_points {
        if !entries.contains(&entry.name) {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the PTX defines no kernel '{}' (it defines: [{}]); declare it \
                     `extern \"C\" __global__` so its name is not mangled",
                    entry.name,
                    entries.join(", ")
                ),
            ));
        }
        ptx_status_word(text, entry)?;
    }
    Ok(())
}
