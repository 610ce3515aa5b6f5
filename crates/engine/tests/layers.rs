//! The engine's modules are layered (`src/lib.rs`'s doc maps them): the
//! graph of which module's code names which other module has no cycle.
//! Read from the sources: `crate::module` paths outside comments and
//! test modules (which come last in a file), a module's directory
//! (`fold/`) counting as the module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules each module's code names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("src") {
        let path = entry.expect("entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            let mut parts = vec![path.clone()];
            if let Ok(dir) = std::fs::read_dir(src.join(name)) {
                for part in dir {
                    let part = part.expect("entry").path();
                    // A directory's `tests.rs` is a test module.
                    if part.extension().is_some_and(|e| e == "rs")
                        && part.file_stem().is_some_and(|s| s != "tests")
                    {
                        parts.push(part);
                    }
                }
            }
            files.insert(name.to_owned(), parts);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, parts) in &files {
        let mut uses = BTreeSet::new();
        for part in parts {
            let text = std::fs::read_to_string(part).expect("read");
            for line in text.lines() {
                let line = line.trim_start();
                if line.starts_with("#[cfg(test)]") {
                    break;
                }
                if line.starts_with("//") {
                    continue;
                }
                for (at, _) in line.match_indices("crate::") {
                    let name: String = line[at + "crate::".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if &name != module && modules.contains(&name) {
                        uses.insert(name);
                    }
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

#[test]
fn the_modules_form_no_cycle() {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.contains_key("fold") && graph.contains_key("counts"));
    assert!(graph["counts"].is_empty(), "counts is a leaf");
    // Peel off modules whose every use is peeled; what remains is cycles.
    let mut placed = BTreeSet::new();
    loop {
        let ready: Vec<&String> = graph
            .iter()
            .filter(|(m, uses)| !placed.contains(*m) && uses.is_subset(&placed))
            .map(|(m, _)| m)
            .collect();
        if ready.is_empty() {
            break;
        }
        placed.extend(ready.into_iter().cloned());
    }
    let left: BTreeMap<&String, Vec<&String>> = graph
        .iter()
        .filter(|(m, _)| !placed.contains(*m))
        .map(|(m, uses)| (m, uses.iter().filter(|u| !placed.contains(*u)).collect()))
        .collect();
    assert!(
        left.is_empty(),
        "these modules use each other in a cycle (module -> what it uses): {left:?}; \
         move what they share into a module below them (src/lib.rs maps the layers)"
    );
}
