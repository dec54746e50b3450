// Package checker validates what informerhub subscribers receive against an
// independent record of the API server's changes, in the style of etcd's
// robustness-test validators.
//
// A test starts a Reference before it writes, so that the reference's own
// LIST and watch see every change; records what each subscriber receives in
// a Transcript, one segment per stream it opens; and at the end waits for
// the reference to catch up (Reference.WaitFor) and calls Check, and
// CheckState to compare with the API server's own LIST as well. Violations
// name the transcript's event index and what was expected instead.
//
// The checker compares resourceVersions numerically: it assumes they are
// decimal integers (etcd revisions), which Kubernetes does not promise but
// every etcd-backed API server serves.
package checker
