//! The layering docs/design.md describes, checked: `sql/` is the bottom
//! layer and knows no domain (no model, policy, schema, run, holds, ledger
//! types), so every other module may use it and it uses none of them.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_sql_layer_uses_no_other_module_of_the_crate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sql");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() >= 5, "the sql module's files: {files:?}");
    let mut offences = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                let after = &rest[i + "crate::".len()..];
                if !after.starts_with("sql") {
                    offences.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
                rest = after;
            }
            if code.contains("super::super") {
                offences.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "sql/ must stay domain-free (docs/design.md):\n{}",
        offences.join("\n")
    );
}
