//! Windows on imbalance (`window_on_imbalance_pct`): every rank shares
//! its pace of steps each second ([`super::live_status`]); rank 0 reads
//! them all and opens a window when the slowest rank's steps take past the
//! threshold longer than the median of the others', once each time
//! imbalance begins, so that the window holds the moment it did.
//!
//! The pace is of whole steps: where every rank waits for the slowest in
//! each step (a collective per step), all keep one pace and none lags;
//! rolling windows' straggler analysis finds that rank instead.

use std::path::Path;

use rankscope_common::window;

/// A rank whose steps lag the others'.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Lag {
    pub(super) rank: u32,
    /// Its seconds per step.
    pub(super) step_s: f64,
    /// The median of the other ranks' seconds per step.
    pub(super) others_s: f64,
}

/// The slowest of `paces` (`(rank, seconds per step)`) where its steps
/// take more than `pct` % and `min_s` seconds longer than the median of
/// the others'; `None` with fewer than two ranks.
pub(super) fn lagging(paces: &[(u32, f64)], pct: f64, min_s: f64) -> Option<Lag> {
    let slowest = paces
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
    let mut others: Vec<f64> = paces
        .iter()
        .filter(|p| p.0 != slowest.0)
        .map(|p| p.1)
        .collect();
    if others.is_empty() {
        return None;
    }
    others.sort_by(f64::total_cmp);
    let middle = others.len() / 2;
    let others_s = match others.len() % 2 {
        1 => others[middle],
        _ => (others[middle - 1] + others[middle]) / 2.0,
    };
    let (rank, step_s) = slowest;
    let lags = step_s > others_s * (1.0 + pct / 100.0) && step_s - others_s >= min_s;
    lags.then_some(Lag {
        rank,
        step_s,
        others_s,
    })
}

/// Rank 0's watch for a rank whose steps begin to lag.
pub(super) struct ImbalanceWatch {
    pct: f64,
    min_s: f64,
    /// Whether the last look found a rank lagging: no new window until
    /// one finds none.
    lagging: bool,
}

impl ImbalanceWatch {
    /// A watch for ranks lagging by `pct` % and `min_s` seconds; `None`
    /// where `pct` is 0 (windows on imbalance off).
    pub(super) fn new(pct: f64, min_s: f64) -> Option<Self> {
        (pct > 0.0).then_some(ImbalanceWatch {
            pct,
            min_s,
            lagging: false,
        })
    }

    /// The rank lagging among the paces the `world` ranks of run `run`
    /// shared in `dir`, where imbalance begins with this look (not where it
    /// went on from the last).
    pub(super) fn begun(&mut self, dir: &Path, world: u32, run: Option<&str>) -> Option<Lag> {
        let paces: Vec<(u32, f64)> =
            window::read_statuses(dir, 0..world, run, window::FRESH_STATUS)
                .into_iter()
                .filter_map(|(rank, status)| Some((rank, status.pace()?)))
                .collect();
        let lag = lagging(&paces, self.pct, self.min_s);
        let was = std::mem::replace(&mut self.lagging, lag.is_some());
        lag.filter(|_| !was)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_rank_lags_past_the_threshold_over_the_others_median() {
        let paces = [(0, 0.010), (1, 0.011), (2, 0.031), (3, 0.009)];
        let lag = lagging(&paces, 100.0, 0.01).unwrap();
        assert_eq!((lag.rank, lag.step_s, lag.others_s), (2, 0.031, 0.010));
        // Not past 220 % (3.2 times), nor past 0.05 s.
        assert_eq!(lagging(&paces, 220.0, 0.01), None);
        assert_eq!(lagging(&paces, 100.0, 0.05), None);
        // Balanced, or alone: none.
        assert_eq!(lagging(&[(0, 0.010), (1, 0.012)], 50.0, 0.0), None);
        assert_eq!(lagging(&[(5, 1.0)], 1.0, 0.0), None);
        // An even number of others: the mean of the middle two.
        let lag = lagging(&[(0, 1.0), (1, 3.0), (2, 9.0)], 100.0, 0.0).unwrap();
        assert_eq!(lag.others_s, 2.0);
    }

    #[test]
    fn a_window_opens_once_each_time_imbalance_begins() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rank: u32, step_s: f64| {
            let status = window::LiveStatus {
                run: Some("r".into()),
                world_size: 3,
                host: "h".into(),
                elapsed_s: 1.0,
                steps: 10,
                step_s: Some(step_s),
                stages: Vec::new(),
                gpus: Vec::new(),
                simulated: false,
            };
            window::write_status(dir.path(), rank, status).unwrap();
        };
        let mut watch = ImbalanceWatch::new(100.0, 0.0).unwrap();
        for rank in 0..3 {
            write(rank, 0.01);
        }
        assert_eq!(watch.begun(dir.path(), 3, Some("r")), None);
        write(1, 0.05);
        assert_eq!(watch.begun(dir.path(), 3, Some("r")).unwrap().rank, 1);
        assert_eq!(watch.begun(dir.path(), 3, Some("r")), None, "still lagging");
        // Another run's paces are not this one's.
        assert_eq!(watch.begun(dir.path(), 3, Some("other")), None);
        assert_eq!(
            watch.begun(dir.path(), 3, Some("r")).unwrap().rank,
            1,
            "anew"
        );
        write(1, 0.01);
        assert_eq!(watch.begun(dir.path(), 3, Some("r")), None);
        assert!(ImbalanceWatch::new(0.0, 0.0).is_none(), "off");
    }
}
