//! Which sampler ranks the processes of a group may use: each data-parallel rank equally
//! often (once each in pure data parallelism; once per model-parallel peer otherwise).

use crate::error::Error;

/// Refuses `ranks` (every process's sampler rank, in process order) unless each rank
/// `0..num_replicas` appears `ranks.len() / num_replicas` times.
pub fn check_rank_layout(ranks: &[u64], num_replicas: u64) -> Result<(), Error> {
    let world = ranks.len() as u64;
    let even = num_replicas > 0
        && world % num_replicas == 0
        && (0..num_replicas)
            .all(|r| ranks.iter().filter(|&&x| x == r).count() as u64 == world / num_replicas);
    if even {
        return Ok(());
    }
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    let per_process: Vec<String> = ranks
        .iter()
        .enumerate()
        .map(|(p, r)| format!("process {p}: rank {r}"))
        .collect();
    Err(Error::Violation(format!(
        "the {world} processes of the group use sampler ranks {sorted:?} with \
         num_replicas={num_replicas} ({}): every rank 0..{} must appear equally often \
         ({world} / {num_replicas} processes each). In pure data parallelism leave \
         num_replicas and rank unset; with model parallelism pass the data-parallel size and \
         rank (or device_mesh=..., mesh_dim=...)",
        per_process.join(", "),
        num_replicas.saturating_sub(1)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_equally_often() {
        assert!(check_rank_layout(&[0, 1, 2, 3], 4).is_ok());
        assert!(check_rank_layout(&[0, 0, 1, 1], 2).is_ok()); // tensor-parallel pairs
        assert!(check_rank_layout(&[1, 0, 1, 0], 2).is_ok());
        for (ranks, w) in [
            (&[0, 0, 1][..], 2),
            (&[0, 1, 1, 1], 2),
            (&[0, 1], 3),
            (&[0, 1], 0),
        ] {
            let err = check_rank_layout(ranks, w).unwrap_err();
            assert!(matches!(err, Error::Violation(_)), "{ranks:?} {w}");
        }
        let msg = check_rank_layout(&[0, 0], 2).unwrap_err().to_string();
        assert!(
            msg.contains("ranks [0, 0] with num_replicas=2 (process 0: rank 0, process 1: rank 0)"),
            "{msg}"
        );
    }
}
