//! Reading C headers as an independent oracle: where Linux's mlx5 headers are, comment
//! stripping, and the constant expressions of `enum` entries and `#define`s. Used by the
//! conformance tests that check rdmesh's constants and layouts against Linux
//! `include/linux/mlx5/*.h` and rdma-core `infiniband/mlx5dv.h`.

use std::collections::HashMap;
use std::path::PathBuf;

/// The first `/usr/src/*/include/linux/mlx5` directory (Debian `linux-headers-amd64`) that
/// holds every file of `required`, or `None`.
pub fn linux_mlx5_dir(required: &[&str]) -> Option<PathBuf> {
    std::fs::read_dir("/usr/src")
        .ok()?
        .flatten()
        .map(|e| e.path().join("include/linux/mlx5"))
        .find(|p| required.iter().all(|f| p.join(f).exists()))
}

/// `s` without `/* … */` and `// …` comments.
pub fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// A C integer literal (decimal or `0x` hex, `U`/`L` suffixes).
pub fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches(['U', 'u', 'L', 'l']);
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Evaluates the constant expressions the headers use: numbers, known names, `a << b`,
/// `a + b`, parentheses, `BIT(n)`.
pub fn eval(expr: &str, known: &HashMap<String, u64>) -> Option<u64> {
    let e: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
    // Outer parentheses go, so `BIT(n)` is seen here as `BIT(n`.
    let e = e.trim_matches(|c| c == '(' || c == ')');
    if let Some(inner) = e.strip_prefix("BIT(").filter(|r| !r.contains(['<', '+'])) {
        return eval(inner, known).map(|n| 1u64 << n);
    }
    if let Some((a, b)) = e.split_once("<<") {
        return Some(eval(a, known)? << eval(b, known)?);
    }
    if let Some((a, b)) = e.split_once('+') {
        return Some(eval(a, known)? + eval(b, known)?);
    }
    parse_num(e).or_else(|| known.get(e).copied())
}

/// `NAME -> value` for enum entries with an explicit value and numeric `#define`s (comments
/// ignored; the first definition of a name wins).
pub fn constants(text: &str) -> HashMap<String, u64> {
    let text = strip_comments(text);
    let mut m = HashMap::new();
    // Two passes so that values defined in terms of earlier names resolve.
    for _ in 0..2 {
        for line in text.lines() {
            let l = line.trim();
            let (name, value) = if let Some(d) = l.strip_prefix("#define") {
                match d.trim().split_once(char::is_whitespace) {
                    Some((n, v)) => (n.trim(), v.trim()),
                    None => continue,
                }
            } else if let Some((n, v)) = l.split_once('=') {
                (n.trim(), v.trim().trim_end_matches(','))
            } else {
                continue;
            };
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                continue;
            }
            if let Some(v) = eval(value, &m) {
                m.entry(name.to_string()).or_insert(v);
            }
        }
    }
    m
}
