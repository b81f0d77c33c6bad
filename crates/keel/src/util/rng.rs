//! xorshift64: a generator cheap enough for the hot path.
//!
//! Workers draw from it to spread steal victims over their siblings, and
//! the accounting to choose which parks it times. Neither needs more than
//! "not in step with the workload"; both need it for a couple of
//! nanoseconds and no shared state, so each owner keeps its own `u64`.

/// Advances `state`, which must not be zero, and returns its new value.
pub(crate) fn xorshift64(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests {
    use super::xorshift64;

    #[test]
    fn never_returns_zero_and_does_not_repeat_soon() {
        let mut state = 1;
        // Fewer draws under Miri, where each is a thousand times dearer.
        let draws = if cfg!(miri) { 1_000 } else { 10_000 };
        let mut seen = std::collections::HashSet::new();
        for _ in 0..draws {
            let x = xorshift64(&mut state);
            assert_ne!(x, 0);
            assert!(seen.insert(x), "repeated within {draws} draws");
        }
    }
}
