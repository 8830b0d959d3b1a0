//! Max-min fair rates by progressive filling (water-filling).
//!
//! All unfrozen flows grow at the same rate until some resource fills; the flows crossing
//! a full resource are frozen at the rate they reached, and the rest keep growing. The
//! result is the unique max-min fair allocation: no flow can get more without taking from
//! a flow that has no more than it.

/// Relative slack for deciding that two resources fill at the same level.
const TIE: f64 = 1e-12;

/// The max-min fair rate of each flow. `routes[f]` lists the resources flow `f` crosses
/// (indices into `capacity`, each at most once per flow); a flow that crosses nothing gets
/// `f64::INFINITY`. Capacities must be positive.
pub(crate) fn max_min_rates(capacity: &[f64], routes: &[&[usize]]) -> Vec<f64> {
    let mut rate = vec![f64::INFINITY; routes.len()];
    let mut remaining = capacity.to_vec();
    let mut unfrozen_on = vec![0usize; capacity.len()];
    let mut flows_on: Vec<Vec<usize>> = vec![Vec::new(); capacity.len()];
    for (f, route) in routes.iter().enumerate() {
        for &r in route.iter() {
            unfrozen_on[r] += 1;
            flows_on[r].push(f);
        }
    }
    let mut frozen: Vec<bool> = routes.iter().map(|r| r.is_empty()).collect();
    let mut active: Vec<usize> = (0..capacity.len()).filter(|&r| unfrozen_on[r] > 0).collect();
    while !active.is_empty() {
        let level = |r: usize| remaining[r].max(0.0) / unfrozen_on[r] as f64;
        let share = active.iter().map(|&r| level(r)).fold(f64::INFINITY, f64::min);
        let full: Vec<usize> = active.iter().copied().filter(|&r| level(r) <= share * (1.0 + TIE)).collect();
        for r in full {
            for &f in &flows_on[r] {
                if frozen[f] {
                    continue;
                }
                frozen[f] = true;
                rate[f] = share;
                for &q in routes[f].iter() {
                    remaining[q] -= share;
                    unfrozen_on[q] -= 1;
                }
            }
        }
        active.retain(|&r| unfrozen_on[r] > 0);
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_example() {
        // Resources 0 (cap 1) and 1 (cap 2). Flow 0 crosses both, flow 1 only 0, flows 2
        // and 3 only 1: resource 0 fills first at 1/2, then flows 2, 3 split the rest of 1.
        let rates = max_min_rates(&[1.0, 2.0], &[&[0, 1], &[0], &[1], &[1]]);
        assert_eq!(rates, [0.5, 0.5, 0.75, 0.75]);
    }

    #[test]
    fn equal_flows_split_a_bottleneck_and_others_take_the_slack() {
        let rates = max_min_rates(&[3.0, 10.0], &[&[0], &[0], &[0], &[1]]);
        assert_eq!(rates, [1.0, 1.0, 1.0, 10.0]);
    }

    #[test]
    fn allocation_is_feasible_and_every_flow_has_a_saturated_bottleneck() {
        let cap = [4.0, 1.5, 2.0, 7.0];
        let routes: [&[usize]; 6] = [&[0, 1], &[0, 2], &[2, 3], &[3], &[0], &[1, 2, 3]];
        let rates = max_min_rates(&cap, &routes);
        for (r, &c) in cap.iter().enumerate() {
            let load: f64 = routes.iter().zip(&rates).filter(|(route, _)| route.contains(&r)).map(|(_, x)| x).sum();
            assert!(load <= c * (1.0 + 1e-12), "resource {r} overloaded");
        }
        for (f, route) in routes.iter().enumerate() {
            let bottleneck = route.iter().any(|&r| {
                let on_r: Vec<f64> =
                    routes.iter().zip(&rates).filter(|(q, _)| q.contains(&r)).map(|(_, &x)| x).collect();
                let load: f64 = on_r.iter().sum();
                (load - cap[r]).abs() < 1e-9 && on_r.iter().all(|&x| x <= rates[f] + 1e-12)
            });
            assert!(bottleneck, "flow {f} has no bottleneck");
        }
    }

    #[test]
    fn empty_routes_are_unbounded() {
        assert_eq!(max_min_rates(&[1.0], &[&[], &[0]]), [f64::INFINITY, 1.0]);
    }
}
