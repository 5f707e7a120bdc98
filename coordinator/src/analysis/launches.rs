//! Which stage launched each GPU activity: the innermost of the rank's
//! stages open when the host launched it (the stage that began last among
//! those open then). Stages are not matched to Kineto's threads: where
//! several threads run stages at once, the one that began last wins.

use std::collections::BTreeSet;

use rankscope_common::table::StagesView;

/// For each launch time of `launches` (session clock, ns; `None`: not
/// known), the row in `stages` of the innermost stage open then.
pub fn launching_stages(stages: &StagesView, launches: &[Option<u64>]) -> Vec<Option<usize>> {
    let mut by_start: Vec<usize> = (0..stages.len).collect();
    by_start.sort_unstable_by_key(|&i| stages.start_ns[i]);
    let mut by_end = by_start.clone();
    by_end.sort_unstable_by_key(|&i| stages.end_ns[i]);
    let mut order: Vec<usize> = (0..launches.len())
        .filter(|&k| launches[k].is_some())
        .collect();
    order.sort_unstable_by_key(|&k| launches[k]);

    let mut found = vec![None; launches.len()];
    // Open stages at the current time, by start (then row).
    let mut open: BTreeSet<(u64, usize)> = BTreeSet::new();
    let (mut next_start, mut next_end) = (0, 0);
    for k in order {
        let Some(at) = launches[k] else { continue };
        while let Some(&i) = by_start
            .get(next_start)
            .filter(|&&i| stages.start_ns[i] <= at)
        {
            open.insert((stages.start_ns[i], i));
            next_start += 1;
        }
        while let Some(&i) = by_end.get(next_end).filter(|&&i| stages.end_ns[i] < at) {
            open.remove(&(stages.start_ns[i], i));
            next_end += 1;
        }
        found[k] = open.last().map(|&(_, i)| i);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::table::{StageRow, StagesBuilder};

    #[test]
    fn the_innermost_open_stage_launched_it() {
        // step 0–100 holds decode 10–50 holding conv 20–30; then 60–70 idle
        // inside step; a launch at 150 is in no stage.
        let mut builder = StagesBuilder::default();
        for (id, parent, name, start, end) in [
            (1, None, "step", 0, 100),
            (2, Some(1), "decode", 10, 50),
            (3, Some(2), "conv", 20, 30),
        ] {
            builder.append(&StageRow {
                name: name.into(),
                thread: 0,
                thread_name: "main".into(),
                stage_id: id,
                parent_id: parent,
                depth: parent.map_or(0, |_| 1),
                start_ns: start,
                end_ns: end,
                call_index: 0,
                metadata: None,
            });
        }
        let batch = builder.finish().unwrap();
        let stages = StagesView::new(&batch).unwrap();
        let launches = [
            Some(25),
            Some(40),
            Some(65),
            Some(150),
            None,
            Some(5),
            Some(30),
        ];
        let names: Vec<Option<&str>> = launching_stages(&stages, &launches)
            .into_iter()
            .map(|row| row.map(|i| stages.name.get(i)))
            .collect();
        assert_eq!(
            names,
            [
                Some("conv"),
                Some("decode"),
                Some("step"),
                None,
                None,
                Some("step"),
                Some("conv")
            ]
        );
    }
}
