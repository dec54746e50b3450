// Package hubclient is the Go SDK of informerhub: Kubernetes watches and
// snapshots through a hub, with informer semantics and none of the work.
//
// A [Client] talks to one or more hub replicas (New), over TLS unless told
// otherwise, sending a bearer token if given one:
//
//	client, err := hubclient.New([]string{"hub-0:8080", "hub-1:8080"}, hubclient.WithBearerToken(token))
//
// [Client.Watch] delivers every change of the selected objects with no gap,
// whatever happens to connections and replicas: it reconnects and resumes by
// itself, and if the hub cannot resume (the API server compacted the watch's
// resourceVersion away) it re-syncs and reports the differences, marked
// [Event.Resync]. Events carry the object's JSON; decode it with
// [Event.Unstructured] or [Decode]:
//
//	w := client.Watch(ctx, hubclient.Selector{Resource: gvr, Namespace: "web"}, hubclient.WatchOptions{SendInitialEvents: true})
//	defer w.Close()
//	for {
//		e, err := w.Next()
//		if err != nil {
//			return err // the context ended, or the hub refused the watch for good
//		}
//		pod, err := hubclient.Decode[corev1.Pod](e)
//		...
//	}
//
// A [Selector] chooses objects as a Kubernetes LIST does, by namespace,
// labels and fields (any field the API server supports for the type, such
// as pods' spec.nodeName), and beyond: by a CEL expression (Filter), with
// the same semantics (an object that starts matching arrives as ADDED, one
// that stops as DELETED). [WatchOptions] Fields projects objects to the
// paths asked for, and the watch then receives only the changes of those;
// IncludePrevious adds the state before each change ([Event.Previous]):
//
//	sel := hubclient.Selector{Resource: podsGVR, FieldSelector: "spec.nodeName=node-1", Filter: `object.status.phase != "Succeeded"`}
//	w := client.Watch(ctx, sel, hubclient.WatchOptions{Fields: []string{"status.phase"}, IncludePrevious: true})
//
// [Client.Snapshot] (and [Client.SnapshotWithOptions], to project) returns
// the objects of one point in time and the token to watch on from;
// [Client.ListResources] what can be watched, and the fields each type can
// be selected by.
//
// [Client.ListerWatcher] plugs the hub into client-go: a stock
// SharedIndexInformer, and anything built on it, can then run against the hub
// instead of the API server; [ListerWatcher.VerifyCache] checks its store
// against the hub, by [Digest] first and object by object only when the
// digests differ.
//
// Watches reconnect by themselves, and log it to [WithLogger]'s *slog.Logger
// (default slog.Default()): the end of a running stream at info, every
// attempt that fails after it at warn with its number, gRPC code and
// message and the backoff, and "reconnected to the hub" at info; nothing
// while they are healthy. A program that logs with klog, as client-go
// does, passes WithLogger(slog.New(logr.ToSlogHandler(klog.Background()))).
//
// Errors of calls are gRPC status errors (status.Code tells them apart, and
// their google.rpc.ErrorInfo details carry the hub's reasons), context errors,
// or [ErrClientClosed].
package hubclient
