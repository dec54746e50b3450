// Package bench is informerhub's benchmark harness: scenarios that measure
// the hub beside the Kubernetes API server on one machine, in one run, and
// report ratios against that baseline rather than absolute times alone.
//
// The hub runs as its own process (cmd/informerhub, with --debug-listen for
// memory statistics), beside a kube-apiserver and etcd started through
// internal/controlplane, so that the CPU time of each side's processes can
// be read from /proc. Clients run in the harness's process; their cost is
// counted on neither side, and both sides' clients do as little as they can
// (read the bytes, find a timestamp), so they take the same share of the
// machine's two cores.
//
// Scenarios (see Run):
//   - fan-out: N clients receive the same changes, as N direct API server
//     watches and as N hub subscriptions;
//   - slow subscribers: healthy subscribers' latency beside stalled ones;
//   - one object each: N hub subscribers each on one object's name, while
//     changes go round the objects; the hub's CPU per change as N grows;
//   - node agents: N agents each watching the pods of its node
//     (spec.nodeName), as N direct API server watches and as N hub
//     subscriptions; the hub's CPU per change as N grows;
//   - projection: the same fan-out of pods, whole and projected: bytes per
//     delivery and the hub's CPU;
//   - snapshot: a full and a label-selected snapshot against the API
//     server's LIST with the same selector;
//   - memory: heap per cached object and per idle subscriber, RSS, and the
//     API server's watch count as subscribers grow;
//   - startup: from process start to a synced informer, against client-go's
//     typed informer over protobuf; the heap while syncing, against the heap
//     once synced;
//   - ingest: the CPU time per received change of the hub with one
//     subscriber, of a client-go dynamic informer and of a typed informer
//     over protobuf, each a process of its own (the informers are
//     cmd/benchinformer) on the same changes of ConfigMaps and of pods;
//     and the hub's with many subscribers, its throughput ceiling;
//   - consistency check: one of the hub's checks of its cache against the
//     API server (wall time; the hub's, the API server's and etcd's CPU)
//     at 10,000 and 100,000 ConfigMaps, against a client-go paged LIST at
//     an exact resourceVersion, as the check asks;
//   - export: informerhub-export's route to each sink (JetStream on a
//     nats-server, Kafka on kfake, CloudEvents over HTTP) at fixed offered
//     rates, its throughput, lag and CPU per change beside a plain Watch
//     client's (cmd/benchwatch), each a process of its own, on the same
//     changes. The changes come from a synthetic source (a hub on
//     informerhub/hubtest's in-memory cluster, in the harness's process,
//     served over gRPC as the binary serves it), because the control plane
//     cannot make those rates on one small machine; the scenario first
//     measures how many writes it does take.
//
// The in-process benchmarks are Go benchmarks in the informerhub and server
// packages: the fan-out core (BenchmarkFanOut, BenchmarkGRPCFanOut,
// BenchmarkSnapshot) and the query features (BenchmarkOneObjectEach,
// BenchmarkNodeAgents, BenchmarkFilter, BenchmarkProjection); `make bench`
// runs them, and cmd/hubbench folds their results into the same report,
// with the ratios and targets they measure.
//
// Nothing here asserts a speed: the smoke test runs every scenario at tiny
// sizes so the harness keeps working, and the numbers go to BENCHMARKS.md.
package bench
