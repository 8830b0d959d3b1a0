//! How a next token is picked from its logits: greedily, or drawn from the softmax at a
//! temperature after top-k and top-p (nucleus) filtering, as transformers' `generate` does
//! with `do_sample=True` (its warpers in the same order: temperature, top-k, top-p).

use einsum_core::SeededRng;

use crate::{Error, Result};

/// The sampling options of a generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// Divides the logits before the softmax; 0 picks the most likely token (greedy, the
    /// first of equal maxima), whatever `top_k` and `top_p` say.
    pub temperature: f32,
    /// Keeps only the `k` most likely tokens (ties at the k-th logit kept); `None` keeps all.
    pub top_k: Option<usize>,
    /// Keeps the smallest set of most likely tokens whose probabilities add up to at least
    /// `p` (in `(0, 1]`); `None` keeps all.
    pub top_p: Option<f32>,
    /// The seed of the draws: equal seeds, prompts and options give equal tokens.
    pub seed: u64,
}

impl Default for Sampling {
    /// Greedy.
    fn default() -> Self {
        Sampling { temperature: 0.0, top_k: None, top_p: None, seed: 0 }
    }
}

impl Sampling {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self::default()
    }

    /// Refuses options no draw can follow: a negative or non-finite temperature, `top_k`
    /// of 0, `top_p` outside `(0, 1]`.
    pub fn check(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::Usage(format!("the temperature must be finite and >= 0, got {}", self.temperature)));
        }
        if self.top_k == Some(0) {
            return Err(Error::Usage("top-k must keep at least one token, got 0".into()));
        }
        if let Some(p) = self.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(Error::Usage(format!("top-p must be in (0, 1], got {p}")));
        }
        Ok(())
    }

    /// The token picked from `logits` (one per vocabulary entry), drawing from `rng` unless
    /// greedy. A NaN logit is never picked; logits that are all NaN are an error.
    pub fn pick(&self, logits: &[f32], rng: &mut SeededRng) -> Result<usize> {
        let best = argmax(logits).ok_or_else(|| Error::Usage("every logit is NaN: no token can be picked".into()))?;
        if self.temperature == 0.0 {
            return Ok(best);
        }
        // Candidates by decreasing logit (ties by id, as a stable sort keeps them).
        let mut order: Vec<usize> = (0..logits.len()).filter(|&i| !logits[i].is_nan()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        if let Some(k) = self.top_k.filter(|&k| k < order.len()) {
            let kth = logits[order[k - 1]];
            order.truncate(order.iter().position(|&i| logits[i] < kth).unwrap_or(order.len()));
        }
        let t = f64::from(self.temperature);
        let top = f64::from(logits[order[0]]) / t;
        let mut weights: Vec<f64> = order.iter().map(|&i| (f64::from(logits[i]) / t - top).exp()).collect();
        if let Some(p) = self.top_p {
            let total: f64 = weights.iter().sum();
            let mut kept = 0.0;
            let n = weights.iter().position(|w| {
                kept += w / total;
                kept >= f64::from(p)
            });
            weights.truncate(n.map_or(weights.len(), |n| n + 1));
        }
        let total: f64 = weights.iter().sum();
        let mut draw = rng.unit() * total;
        for (w, &i) in weights.iter().zip(&order) {
            if draw < *w {
                return Ok(i);
            }
            draw -= w;
        }
        // Rounding left the draw past the last weight: the last candidate kept.
        Ok(order[weights.len() - 1])
    }
}

/// The position of the largest logit (the first of equal ones), NaN ignored; `None` when
/// every logit is NaN or there is none.
pub fn argmax(logits: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &x) in logits.iter().enumerate() {
        if !x.is_nan() && best.is_none_or(|b| x > logits[b]) {
            best = Some(i);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(temperature: f32, top_k: Option<usize>, top_p: Option<f32>) -> Sampling {
        Sampling { temperature, top_k, top_p, seed: 0 }
    }

    /// How often each token is drawn in `n` draws.
    fn histogram(s: &Sampling, logits: &[f32], n: usize) -> Vec<usize> {
        let mut rng = SeededRng::new(7);
        let mut counts = vec![0; logits.len()];
        for _ in 0..n {
            counts[s.pick(logits, &mut rng).unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn greedy_picks_the_first_maximum_and_skips_nan() {
        let mut rng = SeededRng::new(0);
        assert_eq!(Sampling::greedy().pick(&[1.0, 3.0, 3.0, f32::NAN], &mut rng).unwrap(), 1);
        assert_eq!(Sampling::greedy().pick(&[f32::NAN, -1.0], &mut rng).unwrap(), 1);
        assert!(Sampling::greedy().pick(&[f32::NAN], &mut rng).is_err());
    }

    #[test]
    fn draws_follow_the_softmax_at_the_temperature() {
        // Probabilities of logits ln(1), ln(2), ln(5) at temperature 1: 0.125, 0.25, 0.625.
        let logits = [1f32.ln(), 2f32.ln(), 5f32.ln()];
        let counts = histogram(&sampling(1.0, None, None), &logits, 8000);
        for (c, p) in counts.iter().zip([0.125, 0.25, 0.625]) {
            assert!((*c as f64 / 8000.0 - p).abs() < 0.02, "{counts:?}");
        }
        // Temperature 0.5 squares the odds: 1, 4, 25 of 30.
        let counts = histogram(&sampling(0.5, None, None), &logits, 8000);
        assert!((counts[2] as f64 / 8000.0 - 25.0 / 30.0).abs() < 0.02, "{counts:?}");
    }

    #[test]
    fn top_k_and_top_p_keep_only_the_likeliest() {
        let logits = [1f32.ln(), 2f32.ln(), 5f32.ln(), 2f32.ln()];
        // Top-2 keeps 5 and both 2s: ties at the k-th logit are all kept.
        let counts = histogram(&sampling(1.0, Some(2), None), &logits, 4000);
        assert_eq!(counts[0], 0, "{counts:?}");
        assert!(counts[1] > 0 && counts[3] > 0, "{counts:?}");
        // Top-p 0.5: 5/10 alone reaches it.
        let counts = histogram(&sampling(1.0, None, Some(0.5)), &logits, 1000);
        assert_eq!(counts, [0, 0, 1000, 0]);
        // Top-p 0.6 needs a second token (0.5 + 0.2).
        let counts = histogram(&sampling(1.0, None, Some(0.6)), &logits, 1000);
        assert_eq!(counts[0], 0, "{counts:?}");
        assert!(counts[1] + counts[3] > 0, "{counts:?}");
    }

    #[test]
    fn equal_seeds_give_equal_draws_and_bad_options_are_refused() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let s = sampling(0.8, Some(20), Some(0.9));
        let draw = |seed| {
            let mut rng = SeededRng::new(seed);
            (0..20).map(|_| s.pick(&logits, &mut rng).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        for bad in [sampling(-1.0, None, None), sampling(f32::NAN, None, None), sampling(1.0, Some(0), None)] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        for p in [0.0, 1.5, f32::NAN] {
            assert!(sampling(1.0, None, Some(p)).check().is_err(), "{p}");
        }
    }
}
