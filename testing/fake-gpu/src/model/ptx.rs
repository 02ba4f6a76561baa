//! PTX, read for its entry points, their parameters and performance directives, and checked
//! for what `ptxas` would reject first.

use crate::model::kernels::{Entry, MAX_BLOCK_THREADS};

/// The entry points of a PTX text, or the message `ptxas` would give (roughly) for text that
/// is not PTX the fake can read.
pub(crate) fn parse_ptx(text: &str) -> Result<Vec<Entry>, String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    for directive in [".version", ".target"] {
        if !code.split_whitespace().any(|t| t == directive) {
            return Err(format!("ptxas fatal   : PTX has no {directive} directive"));
        }
    }
    let mut entries = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = find_token(rest, ".entry") {
        rest = rest[at + ".entry".len()..].trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() {
            return Err("ptxas fatal   : .entry without a name".into());
        }
        rest = rest[end..].trim_start();
        let mut params = Vec::new();
        if let Some(inside) = rest.strip_prefix('(') {
            let close = inside
                .find(')')
                .ok_or_else(|| format!("ptxas fatal   : unclosed parameter list of {name}"))?;
            for param in inside[..close].split(',').filter(|p| !p.trim().is_empty()) {
                params.push(parse_param(param).map_err(|e| {
                    format!(
                        "ptxas fatal   : parameter '{}' of {name}: {e}",
                        param.trim()
                    )
                })?);
            }
            rest = &inside[close + 1..];
        }
        let (max_threads, after) = performance_directives(rest, name)?;
        rest = check_body(after, name)?;
        entries.push(Entry {
            name: name.to_string(),
            params,
            max_threads,
        });
    }
    Ok(entries)
}

/// PTX's instructions (ISA 8.x), by their base name (before the first `.`).
const OPCODES: &[&str] = &[
    "abs",
    "activemask",
    "add",
    "addc",
    "alloca",
    "and",
    "applypriority",
    "atom",
    "bar",
    "barrier",
    "bfe",
    "bfi",
    "bfind",
    "bmsk",
    "bra",
    "brev",
    "brkpt",
    "brx",
    "call",
    "clz",
    "cnot",
    "copysign",
    "cos",
    "cp",
    "createpolicy",
    "cvt",
    "cvta",
    "discard",
    "div",
    "dp2a",
    "dp4a",
    "elect",
    "ex2",
    "exit",
    "fence",
    "fma",
    "fns",
    "getctarank",
    "griddepcontrol",
    "isspacep",
    "istypep",
    "ld",
    "ldmatrix",
    "ldu",
    "lg2",
    "lop3",
    "mad",
    "mad24",
    "madc",
    "mapa",
    "match",
    "max",
    "mbarrier",
    "membar",
    "min",
    "mma",
    "mov",
    "movmatrix",
    "mul",
    "mul24",
    "multimem",
    "nanosleep",
    "neg",
    "not",
    "or",
    "pmevent",
    "popc",
    "prefetch",
    "prefetchu",
    "prmt",
    "rcp",
    "red",
    "redux",
    "rem",
    "ret",
    "rsqrt",
    "sad",
    "selp",
    "set",
    "setmaxnreg",
    "setp",
    "shf",
    "shfl",
    "shl",
    "shr",
    "sin",
    "slct",
    "sqrt",
    "st",
    "stackrestore",
    "stacksave",
    "stmatrix",
    "sub",
    "subc",
    "suld",
    "suq",
    "sured",
    "sust",
    "szext",
    "tanh",
    "testp",
    "tex",
    "tld4",
    "trap",
    "txq",
    "vabsdiff",
    "vabsdiff2",
    "vabsdiff4",
    "vadd",
    "vadd2",
    "vadd4",
    "vavrg2",
    "vavrg4",
    "vmad",
    "vmax",
    "vmax2",
    "vmax4",
    "vmin",
    "vmin2",
    "vmin4",
    "vote",
    "vset",
    "vset2",
    "vset4",
    "vshl",
    "vshr",
    "vsub",
    "vsub2",
    "vsub4",
    "wgmma",
    "wmma",
    "xor",
];

/// Reads the performance-tuning directives between an entry's parameters and its body
/// (`.maxntid 128, 1, 1`, `.reqntid 64`, `.maxnreg 32`, ...): the most threads per block they
/// allow, and the text after them.
fn performance_directives<'a>(text: &'a str, name: &str) -> Result<(u32, &'a str), String> {
    let mut rest = text.trim_start();
    let mut max_threads = MAX_BLOCK_THREADS;
    while let Some(directive) = rest.strip_prefix('.') {
        let end = directive
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(directive.len());
        let (word, after) = directive.split_at(end);
        // Its operands: numbers separated by commas, up to the next directive or the body.
        let operands_end = after.find(['.', '{', ';']).unwrap_or(after.len());
        let operands = &after[..operands_end];
        if matches!(word, "maxntid" | "reqntid") {
            let dims = operands
                .split(',')
                .map(|d| d.trim().parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .filter(|d| (1..=3).contains(&d.len()) && !d.contains(&0))
                .ok_or_else(|| {
                    format!(
                        "ptxas fatal   : malformed .{word} of {name}: '{}'",
                        operands.trim()
                    )
                })?;
            let threads = dims.iter().map(|&d| u64::from(d)).product::<u64>();
            max_threads = max_threads.min(u32::try_from(threads).unwrap_or(u32::MAX));
        }
        rest = after[operands_end..].trim_start();
    }
    Ok((max_threads, rest))
}

/// Checks the body (`{ ... }`) of entry `name` at the start of `text`, if it has one: every
/// statement is a directive, a label or a PTX instruction (what `ptxas` would reject first).
/// Returns the text after it.
fn check_body<'a>(text: &'a str, name: &str) -> Result<&'a str, String> {
    let text = text.trim_start();
    let Some(inside) = text.strip_prefix('{') else {
        return Ok(text);
    };
    let mut depth = 1;
    let end = inside
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map(|(i, _)| i)
        .ok_or_else(|| format!("ptxas fatal   : unclosed body of {name}"))?;
    for statement in inside[..end].split(';') {
        let mut statement = statement.trim().trim_start_matches(['{', '}']).trim();
        // Labels (`$L__BB0_2:`), possibly before an instruction.
        while let Some((label, after)) = statement.split_once(':') {
            if label.contains(char::is_whitespace) {
                break;
            }
            statement = after.trim().trim_start_matches(['{', '}']).trim();
        }
        let mut tokens = statement.split_whitespace();
        let mut opcode = tokens.next().unwrap_or("");
        if opcode.starts_with('@') {
            opcode = tokens.next().unwrap_or("");
        }
        if opcode.is_empty() || opcode.starts_with('.') {
            continue;
        }
        let base = opcode.split('.').next().unwrap_or("");
        if !OPCODES.contains(&base) {
            return Err(format!(
                "ptxas application ptx input: error   : Unknown instruction '{opcode}' in {name}"
            ));
        }
    }
    Ok(&inside[end + 1..])
}

/// The position of `token` in `text` as a whole word.
fn find_token(text: &str, token: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(token) {
        let at = from + at;
        let after = text[at + token.len()..].chars().next();
        if after.is_none_or(|c| c.is_whitespace()) {
            return Some(at);
        }
        from = at + token.len();
    }
    None
}

/// `(size, alignment)` of a `.param` declaration such as `.param .u64 k_param_0` or
/// `.param .align 4 .b8 k_param_1[12]`.
fn parse_param(param: &str) -> Result<(usize, usize), String> {
    let tokens: Vec<&str> = param.split_whitespace().collect();
    if tokens.first() != Some(&".param") {
        return Err("not a .param".into());
    }
    let mut align = None;
    let mut size = None;
    let mut name = "";
    // After `.ptr`, a state space and `.align` describe the pointee, not the parameter.
    let mut pointee = false;
    let mut i = 1;
    while i < tokens.len() {
        match tokens[i] {
            ".align" => {
                if !pointee {
                    align = tokens.get(i + 1).and_then(|a| a.parse::<usize>().ok());
                }
                i += 1;
            }
            ".ptr" => pointee = true,
            ".global" | ".const" | ".shared" | ".local" => {}
            t if t.starts_with('.') => {
                size = Some(match t.get(2..).unwrap_or("") {
                    "8" => 1,
                    "16" => 2,
                    "32" => 4,
                    "64" => 8,
                    _ => return Err(format!("unknown type {t}")),
                });
            }
            t => name = t,
        }
        i += 1;
    }
    let size = size.ok_or("no type")?;
    let count = match name.split_once('[') {
        Some((_, n)) => n
            .trim_end_matches(']')
            .parse::<usize>()
            .map_err(|_| format!("bad array length in {name}"))?,
        None => 1,
    };
    Ok((size * count, align.unwrap_or(size)))
}
