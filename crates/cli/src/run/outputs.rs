//! Checks that a run's outputs can be written and overwrite nothing it
//! reads, and the temp files they are written through.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use cardinal_export::AtomicFile;
use cardinal_route::Plan;

use super::args::Args;

/// Checks before the run that every file and folder the run writes at its
/// end can be written, so that a mistyped path fails in a moment, not
/// after hours of input. Nothing existing is changed: a file is opened
/// without truncating it, and a file or probe created here is removed.
///
/// Also refuses any output that would overwrite what the run reads: an
/// output file that is an input or the schema (the same file by device and
/// inode, whatever path names it), two outputs that are one file, a
/// summary's folder under `--out` that holds an input (the run replaces
/// the folder whole), and a chains snapshot file given as an input. The
/// output folders' names come from the compiled plan, so they are checked
/// with the same rule the writers use. No other output may go inside a
/// summary folder either, since the folder is replaced whole.
/// Nothing read may be named like a temp file (`.cardinal-tmp-`), which
/// runs remove as debris.
pub(super) fn check_outputs(args: &Args, plan: &Plan, inputs: &[PathBuf]) -> Result<()> {
    let mut read: Vec<(&Path, &str)> = vec![(args.schema.as_path(), "the schema")];
    read.extend(
        inputs
            .iter()
            .filter(|path| path.as_os_str() != "-")
            .map(|path| (path.as_path(), "an input")),
    );
    for (path, what) in &read {
        // Runs remove what is named so as debris (their own temp files),
        // with --out or beside an output file: it may vanish mid-run.
        let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        ensure!(
            !resolved.components().any(|c| c
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(cardinal_export::STAGING_PREFIX.as_bytes())),
            "{} ({what}) is under a name starting with {}, which runs remove as their temp files; move it elsewhere",
            path.display(),
            cardinal_export::STAGING_PREFIX
        );
    }
    let mut written: Vec<(&str, &Path)> = Vec::new();
    for (flag, path) in [
        ("--json", &args.json),
        ("--attributions", &args.attributions),
        ("--rejects", &args.rejects),
    ] {
        let Some(path) = path else { continue };
        if flag != "--rejects" && path.as_os_str() == "-" {
            continue;
        }
        refuse_if_read(flag, path, &read)?;
        if let Some((other, _)) = written
            .iter()
            .find(|(_, seen)| *seen == path.as_path() || same_file(seen, path))
        {
            bail!(
                "{flag} {} is also the file of {other}; give each output its own file",
                path.display()
            );
        }
        written.push((flag, path));
        check_file(path)?;
    }
    if let Some(dir) = &args.out {
        for summary in &plan.summaries {
            let folder = cardinal_export::join_under(dir, &summary.name)?;
            let kept = written.iter().copied().chain(
                args.chains_snapshot
                    .as_deref()
                    .map(|d| ("--chains-snapshot", d)),
            );
            for (flag, path) in kept {
                let parent = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => Path::new("."),
                };
                ensure!(
                    !is_under(parent, &folder) && !is_under(path, &folder),
                    "{flag} {}: the run replaces {} whole, and the output would go with it; write it elsewhere",
                    path.display(),
                    folder.display()
                );
            }
            for (path, what) in &read {
                ensure!(
                    !is_under(path, &folder),
                    "--out {}: the run replaces {} whole, and {what} ({}) is in it; write the results elsewhere",
                    dir.display(),
                    folder.display(),
                    path.display()
                );
            }
        }
    }
    if let Some(dir) = &args.chains_snapshot {
        check_dir(dir)?;
        for attribution in &plan.attributions {
            for extension in ["chains", "names"] {
                let file =
                    cardinal_export::join_under(dir, &format!("{}.{extension}", attribution.name))?;
                refuse_if_read("--chains-snapshot", &file, &read)?;
            }
        }
    }
    Ok(())
}

/// Starts writing output file `path` whole or not at all: it is replaced
/// when [`commit_files`] commits it, and until then an interrupt or an
/// error removes the temp file and leaves `path` as it was.
pub(super) fn output_file(path: &Path) -> Result<AtomicFile> {
    let mut progress = crate::interrupt::lock();
    let file = AtomicFile::create(path).with_context(|| format!("creating {}", path.display()))?;
    progress.temp_files.push(file.temp_path().to_path_buf());
    Ok(file)
}

/// Renames the run's output files into place (see [`output_file`]).
pub(super) fn commit_files(files: Vec<AtomicFile>) -> Result<()> {
    // An interrupt waits, so it never removes a temp file being renamed.
    let mut progress = crate::interrupt::lock();
    for file in files {
        progress.temp_files.retain(|temp| temp != file.temp_path());
        let target = file.target().to_path_buf();
        file.commit()
            .with_context(|| format!("writing {}", target.display()))?;
    }
    Ok(())
}

/// Refuses output `path` of `flag` if it is a file the run reads.
fn refuse_if_read(flag: &str, path: &Path, read: &[(&Path, &str)]) -> Result<()> {
    if let Some((input, what)) = read.iter().find(|(input, _)| same_file(input, path)) {
        bail!(
            "{flag} {} is {what} ({}); the run would overwrite what it reads",
            path.display(),
            input.display()
        );
    }
    Ok(())
}

/// Refuses `--hll-hex` for HyperLogLogs postgresql-hll cannot read, before
/// any input is read.
pub(super) fn check_hll_hex(plan: &Plan) -> Result<()> {
    for summary in &plan.summaries {
        for aggregate in &summary.aggregates {
            if let cardinal_route::AggregateKind::Hll { log2m, regwidth } = aggregate.kind {
                let settings = cardinal_sketch::hll::Settings::new(log2m, regwidth)?;
                settings.check_postgresql().with_context(|| {
                    format!(
                        "--hll-hex: summary {}, hll(x, {log2m}, {regwidth}) \
                         (--java-hll writes it for java-hll readers)",
                        summary.name
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Whether `a` and `b` are one existing file (device and inode on Unix),
/// however each is named: links, `./`, symbolic links.
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(a), Ok(b)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// Whether existing `path` is `folder` or inside it, symbolic links
/// resolved.
fn is_under(path: &Path, folder: &Path) -> bool {
    match (std::fs::canonicalize(path), std::fs::canonicalize(folder)) {
        (Ok(path), Ok(folder)) => path.starts_with(folder),
        _ => false,
    }
}

/// Whether `path` can be written (see [`check_outputs`]).
fn check_file(path: &Path) -> Result<()> {
    let context = || format!("cannot write {}", path.display());
    ensure!(
        !path.is_dir(),
        "cannot write {}: it is a folder",
        path.display()
    );
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::File::create_new(path).with_context(context)?;
            std::fs::remove_file(path).with_context(context)
        }
        Err(e) => Err(e).with_context(context),
    }
}

/// Whether files can be written in folder `dir`, created if missing (see
/// [`check_outputs`]).
fn check_dir(dir: &Path) -> Result<()> {
    let context = || format!("cannot write into {}", dir.display());
    std::fs::create_dir_all(dir).with_context(context)?;
    let probe = dir.join(format!(".cardinal-check-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(context)?;
    std::fs::remove_file(&probe).with_context(context)
}
