//! A checkpoint of several ranks: entered where a `distributed` group of
//! more than one rank is active, it is saved in parts, one set per step,
//! and counts as complete only when every rank's part of that step exists.
//!
//! For `path` = `dir/run.ot` and the state after `s` steps:
//! - `dir/run.step<s>.ot`, the shared part, written by rank 0 alone: the
//!   weights and the optimizer's state (equal on every rank of a
//!   data-parallel run, whose gradients are averaged before each update);
//! - `dir/run.step<s>.rank<k>.ot`, rank `k`'s own part: its generators'
//!   states, its run state and its metric log.
//!
//! Each part is written crash-safely as a single-process checkpoint is
//! (a temporary file, fsynced, renamed), so a part that exists is whole;
//! step `s` is complete when its shared part and all `world_size` rank
//! parts exist. No rank waits for another to save (a periodic save stays
//! on the background writer, no collective there): completeness is read
//! from the folder. After each of its saves a rank removes the parts (any
//! rank's) of steps older than the newest complete one, so the newest
//! complete step is never removed, a newer incomplete one never replaces
//! it, and the rank whose part completes a step leaves that step alone.
//! (No rank writes a step older than a complete one: a removed part is
//! never wanted again.)
//!
//! Without `resume`, entering removes the rank's parts of an earlier run.
//! On `resume`, every rank finds the newest complete step and the ranks
//! agree on it with one collective (a max and a min): a disagreement (the
//! folder is not the same for every rank) is an error, never a resume from
//! a step some rank lacks. Each rank then removes its own parts of newer,
//! incomplete steps (left by a group that lost a rank) and of older ones,
//! and loads the shared part with its own.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use tch::{Device, Tensor};

use super::log::Metrics;
use super::state::{OPTIMIZER, STEP};
use super::{Checkpoint, file};
use crate::durable::{Replaced, Turn};

/// This process's place in the group a checkpoint was entered under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ranks {
    pub rank: usize,
    pub world: usize,
}

impl Ranks {
    /// The group active on this thread, when it has more than one rank
    /// (a world of one saves a single file, as without a group).
    pub(super) fn current() -> Option<Ranks> {
        #[cfg(feature = "distributed")]
        {
            let g = crate::dist::current().ok()?;
            (g.world_size() > 1).then(|| Ranks {
                rank: g.rank(),
                world: g.world_size(),
            })
        }
        #[cfg(not(feature = "distributed"))]
        None
    }
}

/// The file of one part of `path` at `step`: the shared part (`None`) or
/// rank `k`'s.
fn part(path: &Path, step: i64, rank: Option<usize>) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let mut name = format!("{stem}.step{step}");
    if let Some(k) = rank {
        name.push_str(&format!(".rank{k}"));
    }
    if let Some(ext) = path.extension() {
        name.push('.');
        name.push_str(&ext.to_string_lossy());
    }
    path.with_file_name(name)
}

/// The parts of `path` in its folder: by step, the parts present (`None`
/// for the shared one).
fn parts(path: &Path) -> BTreeMap<i64, Vec<Option<usize>>> {
    let mut found: BTreeMap<i64, Vec<Option<usize>>> = BTreeMap::new();
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let prefix = format!("{stem}.step");
    let suffix = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(&suffix))
        else {
            continue;
        };
        let (step, rank) = match rest.split_once(".rank") {
            Some((s, k)) => match k.parse::<usize>() {
                Ok(k) => (s, Some(k)),
                Err(_) => continue,
            },
            None => (rest, None),
        };
        let digits = !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit());
        if let (true, Ok(step)) = (digits, step.parse::<i64>()) {
            found.entry(step).or_default().push(rank);
        }
    }
    found
}

/// The newest step of `path` whose shared part and `world` rank parts all
/// exist.
fn newest_complete(path: &Path, world: usize) -> Option<i64> {
    parts(path).into_iter().rev().find_map(|(step, present)| {
        let whole = present.contains(&None) && (0..world).all(|k| present.contains(&Some(k)));
        whole.then_some(step)
    })
}

impl Checkpoint<'_> {
    /// The newest step at which every one of `world_size` ranks saved its
    /// part of the checkpoint `path` (a checkpoint entered under a
    /// `distributed` group of more than one rank): the step a resumed group
    /// starts from. `None` when no step is complete.
    ///
    /// ```no_run
    /// if let Some(step) = tch_scope::Checkpoint::complete_step("run.ot", 2) {
    ///     let shared = tch_scope::Checkpoint::part("run.ot", step, None);
    ///     let own = tch_scope::Checkpoint::part("run.ot", step, Some(1));
    ///     println!("{} and {}", shared.display(), own.display());
    /// }
    /// ```
    pub fn complete_step(path: impl AsRef<Path>, world_size: usize) -> Option<i64> {
        newest_complete(path.as_ref(), world_size)
    }

    /// The file of one part of a checkpoint of several ranks: the shared
    /// part at `step` (`rank` `None`: the weights and the optimizer's
    /// state, written by rank 0), or rank `k`'s own (its generators, run
    /// state and metrics; [`Checkpoint::read`] reads it). `run.ot` at step
    /// 20 has `run.step20.ot` and `run.step20.rank<k>.ot`.
    ///
    /// ```
    /// let p = tch_scope::Checkpoint::part("out/run.ot", 20, Some(1));
    /// assert_eq!(p, std::path::Path::new("out/run.step20.rank1.ot"));
    /// ```
    pub fn part(path: impl AsRef<Path>, step: i64, rank: Option<usize>) -> PathBuf {
        part(path.as_ref(), step, rank)
    }
}

/// Whether a named tensor of the file belongs in the shared part (the
/// weights, the optimizer's state); the step goes into both.
fn shared(name: &str) -> bool {
    !name.starts_with("__tch_scope_") || name.starts_with(OPTIMIZER)
}

/// Writes `named` (the weights and the training state) and `log` to
/// `path`: one file without `ranks`, else this rank's part of `step` (and
/// the shared part on rank 0), then removes this rank's parts of steps
/// older than the newest complete one.
pub(super) fn save(
    path: &Path,
    ranks: Option<Ranks>,
    step: i64,
    turn: &Turn,
    named: &[(&str, &Tensor)],
    log: &Metrics,
    intact: &dyn Fn() -> Result<(), String>,
) -> Result<Replaced, String> {
    let Some(ranks) = ranks else {
        return file::save(path, turn, named, log, intact);
    };
    let mut outcome = Replaced::Written;
    if ranks.rank == 0 {
        let weights: Vec<(&str, &Tensor)> = named
            .iter()
            .copied()
            .filter(|(n, _)| shared(n) || *n == STEP)
            .collect();
        let shared_path = part(path, step, None);
        outcome = worse(
            outcome,
            file::save(&shared_path, turn, &weights, &Metrics::default(), intact)?,
        );
    }
    let own: Vec<(&str, &Tensor)> = named.iter().copied().filter(|(n, _)| !shared(n)).collect();
    outcome = worse(
        outcome,
        file::save(&part(path, step, Some(ranks.rank)), turn, &own, log, intact)?,
    );
    // Any rank's: no rank writes a step older than a complete one, so the
    // rank whose part completes a step, pruning last, leaves that step
    // alone in the folder.
    prune(path, Whose::Everyone(ranks.world), |s, complete| {
        s < complete
    });
    Ok(outcome)
}

/// Of two parts' outcomes, the one to report.
fn worse(a: Replaced, b: Replaced) -> Replaced {
    match (a, b) {
        (Replaced::Superseded, _) | (_, Replaced::Superseded) => Replaced::Superseded,
        (Replaced::Unsynced(why), _) | (_, Replaced::Unsynced(why)) => Replaced::Unsynced(why),
        _ => Replaced::Written,
    }
}

/// Whose parts [`prune`] removes.
#[derive(Clone, Copy)]
enum Whose {
    /// This rank's (and on rank 0 the shared ones).
    Own(Ranks),
    /// Every rank's, of a group of `world` ranks.
    Everyone(usize),
}

/// Removes the parts (`whose`) of the steps `doomed(step, newest complete
/// step)` names; a part that can't be removed stays (it is never read
/// while a newer step is complete).
fn prune(path: &Path, whose: Whose, doomed: impl Fn(i64, i64) -> bool) {
    let world = match whose {
        Whose::Own(r) => r.world,
        Whose::Everyone(world) => world,
    };
    let complete = newest_complete(path, world).unwrap_or(-1);
    for (step, present) in parts(path) {
        if !doomed(step, complete) {
            continue;
        }
        for rank in present {
            let mine = match (whose, rank) {
                (Whose::Everyone(_), _) => true,
                (Whose::Own(r), Some(k)) => k == r.rank,
                (Whose::Own(r), None) => r.rank == 0,
            };
            if mine {
                let _ = std::fs::remove_file(part(path, step, rank));
            }
        }
    }
}

/// Without `resume`: removes this rank's parts (and on rank 0 the shared
/// ones) of every step, so that an earlier run's complete steps in the
/// folder are never taken for this run's (as a single file is replaced
/// by the run's first save).
pub(super) fn forget(path: &Path, ranks: Ranks) {
    prune(path, Whose::Own(ranks), |_, _| true);
}

/// A checkpoint's tensors by name, and its metric log (as `file::read`
/// gives them).
type Contents = (HashMap<String, Tensor>, Metrics);

/// With `resume`: the tensors and the metric log of the newest step that
/// every rank completed (the shared part and this rank's, as one file
/// would hold them), or `None` when no step is complete. Every rank of the
/// group must call it (one collective).
pub(super) fn read(path: &Path, ranks: Ranks, device: Device) -> Result<Option<Contents>, String> {
    let mine = newest_complete(path, ranks.world).unwrap_or(-1);
    let step = agree(ranks, mine)?;
    // Parts of newer steps are incomplete: a group that lost a rank left
    // them (this run will save those steps again). Older ones are never
    // read again.
    prune(path, Whose::Own(ranks), |s, _| s != step);
    if step < 0 {
        return Ok(None);
    }
    let (mut tensors, _) = file::read(&part(path, step, None), device)?;
    let (own, log) = file::read(&part(path, step, Some(ranks.rank)), device)?;
    tensors.extend(own);
    Ok(Some((tensors, log)))
}

/// The step every rank found, through the group active on this thread.
#[cfg(feature = "distributed")]
fn agree(ranks: Ranks, mine: i64) -> Result<i64, String> {
    let group = crate::dist::current().map_err(|e| e.to_string())?;
    let mut t = Tensor::f_from_slice(&[mine, -mine]).map_err(|e| e.to_string())?;
    group
        .all_reduce(&mut t, crate::dist::ReduceOp::Max)
        .map_err(|e| format!("the ranks could not agree on the step to resume from: {e}"))?;
    let v = Vec::<i64>::try_from(&t).map_err(|e| e.to_string())?;
    let (newest, oldest) = (v[0], -v[1]);
    if newest != oldest {
        return Err(format!(
            "rank {} finds step {mine} the newest complete one, and the ranks \
             found steps from {oldest} to {newest} (-1: none): every rank must \
             see the same folder",
            ranks.rank
        ));
    }
    Ok(mine)
}

#[cfg(not(feature = "distributed"))]
fn agree(_: Ranks, mine: i64) -> Result<i64, String> {
    Ok(mine)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tch-scope-ranks-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn touch(p: &Path) {
        std::fs::write(p, b"").unwrap();
    }

    #[test]
    fn parts_are_named_by_step_and_rank() {
        assert_eq!(
            part(Path::new("d/run.ot"), 25, None),
            Path::new("d/run.step25.ot")
        );
        assert_eq!(
            part(Path::new("run.safetensors"), 5, Some(3)),
            Path::new("run.step5.rank3.safetensors")
        );
        assert_eq!(
            part(Path::new("d/run"), 0, Some(1)),
            Path::new("d/run.step0.rank1")
        );
    }

    /// A step some rank lacks is not complete, however new: the older
    /// complete one is found.
    #[test]
    fn the_newest_step_every_rank_saved_is_complete() {
        let dir = folder("complete");
        let path = dir.join("run.ot");
        assert_eq!(newest_complete(&path, 2), None);
        for rank in [None, Some(0), Some(1)] {
            touch(&part(&path, 20, rank));
        }
        // Step 25: rank 1's part never written; step 30: no shared part.
        touch(&part(&path, 25, None));
        touch(&part(&path, 25, Some(0)));
        touch(&part(&path, 30, Some(0)));
        touch(&part(&path, 30, Some(1)));
        // A temporary file and another checkpoint's parts are not parts.
        touch(&dir.join(".run.step40.1.0.tmp.ot"));
        touch(&dir.join("other.step40.ot"));
        touch(&dir.join("run.step40x.rank1.ot"));
        assert_eq!(newest_complete(&path, 2), Some(20));
        assert_eq!(newest_complete(&path, 3), None);
        // Rank 1 alone: its own parts; after a save, every part older than
        // the complete step.
        touch(&part(&path, 15, Some(1)));
        touch(&part(&path, 15, None));
        touch(&part(&path, 10, Some(0)));
        prune(&path, Whose::Own(Ranks { rank: 1, world: 2 }), |s, c| s < c);
        assert!(!part(&path, 15, Some(1)).exists());
        assert!(part(&path, 15, None).exists());
        assert!(part(&path, 20, Some(1)).exists());
        prune(&path, Whose::Everyone(2), |s, c| s < c);
        assert!(!part(&path, 15, None).exists());
        assert!(!part(&path, 10, Some(0)).exists());
        assert!(part(&path, 20, None).exists());
        assert!(part(&path, 25, Some(0)).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
