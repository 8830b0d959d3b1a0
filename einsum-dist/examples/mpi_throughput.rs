//! The MPI transport's throughput between two ranks against a plain memcpy of the same
//! bytes in one process. Run with
//! `mpirun -np 2 target/release/examples/mpi_throughput` (built by
//! `cargo build --release -p einsum-dist --features mpi --example mpi_throughput`).
//!
//! Rank 0 sends a block of each size to rank 1, which receives it into a new block (the
//! transport's receive) and answers with a 4-byte block; the time is from the send to the
//! answer, the median of the repeats. The memcpy copies the same bytes into a new vector
//! (whose pages fault in as it writes them, as the received block's do) and into one already
//! written (no faults: the copy alone).

use std::time::{Duration, Instant};

use einsum_core::{DType, HostTensor, TensorType};
use einsum_dist::{Envelope, MpiTransport, Transport};

const SIZES_MB: [usize; 3] = [1, 16, 256];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let t = MpiTransport::init().expect("MPI");
    assert_eq!(t.ranks(), 2, "run with mpirun -np 2");
    let wait = Duration::from_secs(60);
    let ack = HostTensor::filled(TensorType::zero_bounded(&[1]), DType::F32, 1.0);
    let ack_shape = |_: &Envelope| Ok((TensorType::zero_bounded(&[1]), DType::F32));
    if t.rank() == 0 {
        println!("| block | transport (GB/s) | memcpy into new memory (GB/s) | memcpy into written memory (GB/s) |");
        println!("|---|---|---|---|");
    }
    for mb in SIZES_MB {
        let ty = TensorType::zero_bounded(&[mb << 18]);
        let repeats = if mb >= 256 { 5 } else { 20 };
        let block = HostTensor::random(ty.clone(), DType::F32, 1);
        let shape = |_: &Envelope| Ok((ty.clone(), DType::F32));
        let mut times = Vec::new();
        for _ in 0..repeats + 1 {
            if t.rank() == 0 {
                let start = Instant::now();
                t.send(1, 1, block.clone()).expect("sent");
                t.receive(wait, &ack_shape).expect("received").expect("answered");
                times.push(start.elapsed().as_secs_f64());
            } else {
                let got = t.receive(wait, &shape).expect("received").expect("in time");
                assert_eq!(got.1.size_bytes(), mb << 20);
                t.send(0, 2, ack.clone()).expect("sent");
            }
        }
        t.flush(wait).expect("delivered");
        if t.rank() == 0 {
            let bytes = block.contiguous_ne_bytes().expect("compact");
            let time = |warm: bool| {
                let mut to = vec![0u8; bytes.len()];
                to.fill(1);
                let copies = (0..repeats)
                    .map(|_| {
                        if !warm {
                            to = vec![0u8; bytes.len()];
                        }
                        let start = Instant::now();
                        to.copy_from_slice(bytes);
                        std::hint::black_box(&to);
                        start.elapsed().as_secs_f64()
                    })
                    .collect();
                median(copies)
            };
            // The first exchange warms both ranks up.
            let sent = median(times[1..].to_vec());
            let gbs = |s: f64| (mb << 20) as f64 / s / 1e9;
            println!("| {mb} MB | {:.2} | {:.2} | {:.2} |", gbs(sent), gbs(time(false)), gbs(time(true)));
        }
    }
}
