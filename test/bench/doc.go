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
//   - snapshot: a full and a label-selected snapshot against the API
//     server's LIST with the same selector;
//   - memory: heap per cached object and per idle subscriber, RSS, and the
//     API server's watch count as subscribers grow;
//   - startup: from process start to a synced informer.
//
// The in-process fan-out core benchmarks are Go benchmarks in the
// informerhub and server packages (BenchmarkFanOut, BenchmarkGRPCFanOut);
// cmd/hubbench runs them and folds their results into the same report.
//
// Nothing here asserts a speed: the smoke test runs every scenario at tiny
// sizes so the harness keeps working, and the numbers go to BENCHMARKS.md.
package bench
