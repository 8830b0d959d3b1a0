//! The MPI transport between real processes. Each test, run by the test harness, launches
//! itself under `mpirun` (`EINSUM_DIST_RANK_TEST` set) and checks the job's exit; run so, its
//! body is one rank. Needs Open MPI (`mpirun` on the path): the `mpi` feature is only for
//! machines that have it, so a missing `mpirun` fails the test rather than skipping it.
#![cfg(feature = "mpi")]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use einsum_core::{DType, HostTensor, TensorType};
use einsum_dist::{Envelope, MpiTransport, Transport, TransportError};

const CHILD: &str = "EINSUM_DIST_RANK_TEST";

/// In the harness: runs test `name` as a job of `ranks` ranks and asserts it succeeds.
/// Under mpirun: returns true, and the caller runs the rank's body.
fn as_rank(name: &str, ranks: usize) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new("mpirun")
        .args(["-np", &ranks.to_string(), "--oversubscribe", "-x", &format!("{CHILD}=1")])
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs: the `mpi` feature's tests need Open MPI (apt-get install libopenmpi-dev openmpi-bin)");
    let start = Instant::now();
    while child.try_wait().expect("waitable").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("mpirun ended");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} over {ranks} ranks failed:\n{text}");
    // Every rank ran the body: the harness says so once per rank.
    assert_eq!(text.matches("1 passed").count(), ranks, "{text}");
    false
}

/// The blocks rank `from` sends rank `to`: one per dtype and shape, tag by tag, the seed
/// derived from (from, to, tag) so that the receiver can regenerate them.
fn blocks(from: usize, to: usize) -> Vec<(u32, HostTensor)> {
    let shapes: [&[usize]; 4] = [&[3], &[4, 5], &[2, 3, 4], &[0]];
    let mut out = Vec::new();
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        for (j, shape) in shapes.iter().enumerate() {
            let tag = (i * shapes.len() + j) as u32 + 1;
            let seed = (from * 1000 + to * 100) as u64 + u64::from(tag);
            let ty = TensorType::zero_bounded(shape);
            let block = if dtype == DType::I32 {
                HostTensor::random_indices(ty, 1000, seed)
            } else {
                HostTensor::random(ty, dtype, seed)
            };
            out.push((tag, block));
        }
    }
    out
}

/// Receives `n` messages (each within 30 s), shaped by `shape`.
fn receive_all(t: &MpiTransport, n: usize, shape: einsum_dist::Shape<'_>) -> Vec<(Envelope, HostTensor)> {
    (0..n)
        .map(|i| {
            t.receive(Duration::from_secs(30), shape).expect("received").unwrap_or_else(|| panic!("message {i} late"))
        })
        .collect()
}

/// Every rank sends every other rank blocks of every dtype (an empty one too), a strided
/// view and a 64 MB block; each receives exactly those, bit for bit.
fn exchange() {
    let t = MpiTransport::init().expect("MPI");
    let (me, ranks) = (t.rank(), t.ranks());
    let big = TensorType::zero_bounded(&[16 << 20]);
    let view_of = TensorType::zero_bounded(&[6, 8]);
    let view = TensorType::new(&[1, 2], &[5, 6]).expect("a box");
    for to in (0..ranks).filter(|&r| r != me) {
        for (tag, b) in blocks(me, to) {
            t.send(to, tag, b).expect("sent");
        }
        let whole = HostTensor::random(view_of.clone(), DType::F32, (me * 10 + to) as u64);
        t.send(to, 100, whole.view(&view).expect("a view")).expect("sent");
        t.send(to, 101, HostTensor::random(big.clone(), DType::F32, (me * 10 + to) as u64)).expect("sent");
    }
    let per_rank = blocks(0, 1).len() + 2;
    let shape = |e: &Envelope| {
        Ok(match e.tag {
            100 => (view.clone(), DType::F32),
            101 => (big.clone(), DType::F32),
            tag => {
                let b = &blocks(e.from, me)[tag as usize - 1].1;
                (b.ty().clone(), b.dtype())
            }
        })
    };
    let got = receive_all(&t, per_rank * (ranks - 1), &shape);
    for (e, block) in got {
        let want = match e.tag {
            100 => HostTensor::random(view_of.clone(), DType::F32, (e.from * 10 + me) as u64).slice(&view).unwrap(),
            101 => HostTensor::random(big.clone(), DType::F32, (e.from * 10 + me) as u64),
            tag => blocks(e.from, me)[tag as usize - 1].1.clone(),
        };
        assert_eq!(e.bytes, want.size_bytes());
        assert!(block.to_ne_bytes() == want.to_ne_bytes(), "rank {me}: tag {} from {} differs", e.tag, e.from);
    }
    t.flush(Duration::from_secs(30)).expect("delivered");
}

#[test]
fn every_rank_receives_what_the_others_sent_over_two_ranks() {
    if as_rank("every_rank_receives_what_the_others_sent_over_two_ranks", 2) {
        exchange();
    }
}

#[test]
fn every_rank_receives_what_the_others_sent_over_four_ranks() {
    if as_rank("every_rank_receives_what_the_others_sent_over_four_ranks", 4) {
        exchange();
    }
}

/// With 1000-byte messages, a 4099-byte block goes as five chunks and arrives whole, between
/// two blocks of the same tag that it must not mix with.
#[test]
fn a_block_over_the_chunk_size_goes_in_chunks() {
    if !as_rank("a_block_over_the_chunk_size_goes_in_chunks", 2) {
        return;
    }
    let t = MpiTransport::with_chunk_bytes(1000).expect("MPI");
    let ty = |n: usize| TensorType::zero_bounded(&[n]);
    let blocks = [HostTensor::random(ty(10), DType::F32, 1), HostTensor::random(ty(4099), DType::F32, 2)];
    let odd = HostTensor::random(ty(4099 / 2), DType::F16, 3);
    if t.rank() == 0 {
        for b in [&blocks[0], &odd, &blocks[1]] {
            t.send(1, 7, b.clone()).expect("sent");
        }
        t.flush(Duration::from_secs(30)).expect("delivered");
        return;
    }
    let order = [(ty(10), DType::F32), (ty(4099 / 2), DType::F16), (ty(4099), DType::F32)];
    for (i, (want_ty, dtype)) in order.into_iter().enumerate() {
        let shape = |_: &Envelope| Ok((want_ty.clone(), dtype));
        let (e, got) = t.receive(Duration::from_secs(30), &shape).expect("received").expect("in time");
        let want = [&blocks[0], &odd, &blocks[1]][i];
        assert_eq!((e.from, e.tag, e.bytes), (0, 7, want.size_bytes()));
        assert_eq!(&got, want);
    }
}

/// A message whose length does not fit the receiver's shape is refused naming its sender and
/// tag (and drained); a tag above the library's bound is refused on sending.
#[test]
fn misfits_and_tags_out_of_bound_are_typed_errors() {
    if !as_rank("misfits_and_tags_out_of_bound_are_typed_errors", 2) {
        return;
    }
    let t = MpiTransport::init().expect("MPI");
    assert!(t.tag_bound() >= 32767);
    let over =
        t.send(1 - t.rank(), t.tag_bound() + 1, HostTensor::filled(TensorType::zero_bounded(&[1]), DType::F32, 1.0));
    assert!(matches!(&over, Err(TransportError::Library { reason, .. }) if reason.contains("largest tag")), "{over:?}");
    if t.rank() == 0 {
        t.send(1, 5, HostTensor::random(TensorType::zero_bounded(&[3]), DType::F32, 1)).expect("sent");
        t.send(1, 6, HostTensor::random(TensorType::zero_bounded(&[2]), DType::F32, 1)).expect("sent");
        t.flush(Duration::from_secs(30)).expect("delivered");
        return;
    }
    let two = |_: &Envelope| Ok((TensorType::zero_bounded(&[2]), DType::F32));
    let e = t.receive(Duration::from_secs(30), &two).expect_err("12 bytes, not 8");
    assert!(matches!(e, TransportError::Unexpected { envelope: Envelope { from: 0, tag: 5, bytes: 12 }, .. }), "{e}");
    // The misfit was drained: the next message is the one that fits.
    let (e, _) = t.receive(Duration::from_secs(30), &two).expect("received").expect("in time");
    assert_eq!(e.tag, 6);
}
