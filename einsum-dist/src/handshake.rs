//! What the ranks check before the first run: that they prepared the same graph, and that
//! the ranks owning devices of one simulated node run on one host.
//!
//! Both go over the tag [`HANDSHAKE`]: rank 0 sends every rank its graph's fingerprint, and
//! every rank sends rank 0 its host's name ([`Transport::host`]). A rank whose graph differs
//! fails naming itself; rank 0 fails naming the ranks of a node that the job put on two
//! hosts. Where the job has only one host every placement passes (ranks oversubscribed on
//! one machine stand for the nodes).

use std::hash::{DefaultHasher, Hash, Hasher};

use einsum_core::{BackendError, DType, HostTensor, TensorType, taskgraph::TaskGraph};

use crate::{Envelope, TransportError, peers::RankPeers};

/// The tag of the handshake's messages.
pub(crate) const HANDSHAKE: u32 = 0;

/// A fingerprint of `graph`: every device, buffer and task with its dependencies and label.
/// Equal graphs give equal fingerprints in every process of one build.
pub(crate) fn fingerprint(graph: &TaskGraph) -> u64 {
    let mut h = DefaultHasher::new();
    graph.devices().hash(&mut h);
    for b in graph.buffers() {
        (b.device.0, b.ty.lower(), b.ty.upper(), b.dtype.to_string()).hash(&mut h);
    }
    for node in graph.nodes() {
        format!("{:?}", node.task).hash(&mut h);
        node.deps.iter().map(|d| d.0).collect::<Vec<_>>().hash(&mut h);
        node.label.hash(&mut h);
    }
    h.finish()
}

/// The type of a handshake message from its envelope: whole i32 (the fingerprint's two
/// halves, or a unique id's 32 words, from rank 0; a host name's bytes, padded, from any
/// other rank).
pub(crate) fn shape(envelope: &Envelope) -> Result<(TensorType, DType), TransportError> {
    if !envelope.bytes.is_multiple_of(4) {
        let why = "a handshake message comes as whole i32".to_string();
        return Err(TransportError::Unexpected { envelope: *envelope, why });
    }
    Ok((TensorType::zero_bounded(&[envelope.bytes / 4]), DType::I32))
}

/// Sends every other rank the 128 bytes rank 0 gets from `make` (a communicator's unique
/// id, such as NCCL's), over the handshake's tag, after the handshake; returns them on every
/// rank. Fails on rank 0 when `make` does, elsewhere when rank 0 sent nothing in time.
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
pub(crate) fn share_id(
    peers: &RankPeers,
    make: impl FnOnce() -> Result<[u8; 128], BackendError>,
) -> Result<[u8; 128], BackendError> {
    let rank = peers.rank();
    let transport = &*peers.transport;
    let fail =
        |reason: String| BackendError::Device { operation: format!("rank {rank}: sharing the unique id"), reason };
    if rank == 0 {
        let id = make()?;
        let words = id.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
        let block = HostTensor::from_i32(TensorType::zero_bounded(&[32]), words).expect("32 words");
        for to in 1..transport.ranks() {
            transport.send(to, HANDSHAKE, block.clone()).map_err(|e| fail(e.to_string()))?;
        }
        return Ok(id);
    }
    let got = peers.take(peers.patience, |tag| tag == HANDSHAKE).map_err(|e| fail(e.to_string()))?;
    let Some((_, _, block)) = got else {
        let patience = peers.patience.as_secs_f64();
        return Err(fail(format!("rank 0 sent no unique id in {patience:.1} s (it may have failed)")));
    };
    let words = block.to_i32();
    if words.len() != 32 {
        return Err(fail(format!("rank 0 sent {} words where a unique id's 32 were expected", words.len())));
    }
    let mut id = [0u8; 128];
    for (chunk, w) in id.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    Ok(id)
}

/// `text`'s bytes, zero-padded to whole i32.
fn encode(text: &str) -> HostTensor {
    let mut bytes = text.as_bytes().to_vec();
    bytes.resize(bytes.len().div_ceil(4) * 4, 0);
    let words = bytes.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
    HostTensor::from_i32(TensorType::zero_bounded(&[words.len()]), words).expect("one element per word")
}

/// The text [`encode`] made.
fn decode(block: &HostTensor) -> String {
    let bytes: Vec<u8> = block.to_i32().iter().flat_map(|w| w.to_ne_bytes()).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Runs the handshake for `graph` on this rank (see the module docs); `node_of` gives each
/// device's simulated node, where the topology has several.
pub(crate) fn handshake(
    graph: &TaskGraph,
    peers: &RankPeers,
    node_of: Option<&dyn Fn(usize) -> usize>,
) -> Result<(), BackendError> {
    let rank = peers.rank();
    let transport = &*peers.transport;
    let fail = |reason: String| BackendError::Device { operation: format!("rank {rank}: preparing"), reason };
    let patience = peers.patience.as_secs_f64();
    let mine = fingerprint(graph);
    if rank != 0 {
        transport.send(0, HANDSHAKE, encode(&transport.host())).map_err(|e| fail(e.to_string()))?;
        let from_root = |tag: u32| tag == HANDSHAKE;
        let got = peers.take(peers.patience, from_root).map_err(|e| fail(e.to_string()))?;
        let Some((_, _, block)) = got else {
            return Err(fail(format!(
                "rank 0 sent no graph fingerprint in {patience:.1} s (it may have failed before preparing)"
            )));
        };
        let v = block.to_i32();
        if v.len() != 2 {
            return Err(fail(format!("rank 0 sent {} words where its graph's fingerprint (2) was expected", v.len())));
        }
        let theirs = (u64::from(v[0] as u32) << 32) | u64::from(v[1] as u32);
        if theirs != mine {
            return Err(fail(format!(
                "rank {rank} compiled another task graph than rank 0 (fingerprint {mine:016x}, rank 0's {theirs:016x}): \
                 every rank must compile the same plan (a search cut short by wall time can differ between ranks)"
            )));
        }
        return Ok(());
    }
    let halves = vec![(mine >> 32) as u32 as i32, mine as u32 as i32];
    let block = HostTensor::from_i32(TensorType::zero_bounded(&[2]), halves).expect("two elements");
    for to in 1..transport.ranks() {
        transport.send(to, HANDSHAKE, block.clone()).map_err(|e| fail(e.to_string()))?;
    }
    let mut hosts = vec![None; transport.ranks()];
    hosts[0] = Some(transport.host());
    for _ in 1..transport.ranks() {
        let got = peers.take(peers.patience, |tag| tag == HANDSHAKE).map_err(|e| fail(e.to_string()))?;
        let Some((from, _, block)) = got else {
            let missing: Vec<usize> = (0..hosts.len()).filter(|&r| hosts[r].is_none()).collect();
            return Err(fail(format!("ranks {missing:?} sent no host name in {patience:.1} s")));
        };
        hosts[from] = Some(decode(&block));
    }
    let hosts: Vec<String> = hosts.into_iter().map(|h| h.unwrap_or_default()).collect();
    match node_of {
        Some(node_of) => check_placement(&hosts, peers, node_of).map_err(fail),
        None => Ok(()),
    }
}

/// Checks that the ranks owning devices of one simulated node run on one host, where the
/// job has several hosts; the error names the node, the ranks and their hosts.
fn check_placement(hosts: &[String], peers: &RankPeers, node_of: &dyn Fn(usize) -> usize) -> Result<(), String> {
    if hosts.iter().all(|h| *h == hosts[0]) {
        return Ok(());
    }
    let layout = &peers.layout;
    // Per node, the first rank that owns some of its devices.
    let mut first: Vec<(usize, usize)> = Vec::new();
    for rank in 0..layout.ranks() {
        let node = node_of(layout.devices_of(rank).start);
        match first.iter().find(|(n, _)| *n == node) {
            Some(&(_, other)) if hosts[other] != hosts[rank] => {
                return Err(format!(
                    "ranks {other} and {rank} own devices of simulated node {node} but run on hosts `{}` and `{}`: \
                     launch the ranks of one node on one host (e.g. mpirun --map-by ppr:RANKS_PER_NODE:node)",
                    hosts[other], hosts[rank]
                ));
            }
            Some(_) => {}
            None => first.push((node, rank)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use einsum_core::taskgraph::examples::two_device_gather;

    use super::*;
    use crate::{Local, RankLayout, messages::Messages};

    /// Rank `rank`'s peers in a job of two over `transport`, for the two-device gather.
    fn peers(transport: Local, patience: Duration) -> RankPeers {
        let layout = RankLayout::contiguous(2, 2).expect("even");
        let messages = Messages::of(&two_device_gather(), &layout).expect("its devices");
        let sent = (0..2).map(|_| Default::default()).collect();
        RankPeers::new(Arc::new(transport), layout, messages, patience, sent)
    }

    /// After the handshake, every rank gets the bytes rank 0 made; when rank 0 fails to make
    /// them, its error is its own and the other rank's names rank 0.
    #[test]
    fn every_rank_gets_the_id_rank_0_made() {
        let id: [u8; 128] = std::array::from_fn(|i| (i * 5 + 1) as u8);
        let got: Vec<[u8; 128]> = std::thread::scope(|s| {
            let ranks: Vec<_> = Local::job(2)
                .into_iter()
                .map(|t| {
                    s.spawn(move || {
                        let p = peers(t, Duration::from_secs(10));
                        handshake(&two_device_gather(), &p, None).expect("same graph");
                        share_id(&p, || Ok(id)).expect("shared")
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().expect("a rank")).collect()
        });
        assert_eq!(got, vec![id, id]);
        let errors: Vec<String> = std::thread::scope(|s| {
            let ranks: Vec<_> = Local::job(2)
                .into_iter()
                .map(|t| {
                    s.spawn(move || {
                        let p = peers(t, Duration::from_millis(300));
                        let unavailable = || Err(BackendError::Unavailable("no NCCL library found".into()));
                        share_id(&p, unavailable).expect_err("no id").to_string()
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().expect("a rank")).collect()
        });
        assert!(errors[0].contains("no NCCL library"), "{}", errors[0]);
        assert!(errors[1].contains("rank 0 sent no unique id"), "{}", errors[1]);
    }
}
