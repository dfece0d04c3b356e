//! Prints the state count of one store-check configuration:
//! `writers calls kills crashes gc sessions replays`.
use workrail_model::storecheck::{Config, explore};
fn main() {
    let a: Vec<u8> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let at = |i: usize, d: u8| a.get(i).copied().unwrap_or(d);
    let config = Config {
        writers: at(0, 2),
        calls: at(1, 1),
        kills: at(2, 1),
        crashes: at(3, 1),
        planted: None,
        gc: at(4, 1) == 1,
        sessions: at(5, 1),
        replays: at(6, 0),
    };
    let t = std::time::Instant::now();
    let o = explore(&config, 100_000_000);
    println!(
        "{config:?}: {} states, truncated {}, {:?}, {:?}",
        o.states,
        o.truncated,
        t.elapsed(),
        o.violation
    );
}
