package export

// Headers of an exported message (a JetStream message, a Kafka record)
// besides its data, the object's JSON. CloudEvents carry the same as
// attributes and extensions (cloudevents.go).
const (
	// HeaderID is the change's deterministic id (Change.ID). JetStream
	// messages carry it as Nats-Msg-Id instead.
	HeaderID = "Informerhub-Id"
	// HeaderResumeToken holds the position right after the change: the
	// route resumes from the last message's.
	HeaderResumeToken = "Informerhub-Resume-Token"
	// HeaderType is ADDED, MODIFIED or DELETED; or GAP_START or GAP_END,
	// a gap's markers, which carry no object.
	HeaderType = "Informerhub-Type"
	// HeaderResourceVersion is the change's resourceVersion; a GAP_END's,
	// the listing's.
	HeaderResourceVersion = "Informerhub-Resource-Version"
	// HeaderFromRelist is "true" on a change the hub found by relisting,
	// or on a gap's differences: the changes in between are unknown.
	HeaderFromRelist = "Informerhub-From-Relist"
	// HeaderGapReplaces is "true" on a GAP_END whose gap listed every
	// object as ADDED: the consumer drops what it holds that the gap did
	// not list.
	HeaderGapReplaces = "Informerhub-Gap-Replaces"
	// HeaderObjectOmitted is on a change published without its object,
	// which was too large for the sink; it says why, with the size.
	HeaderObjectOmitted = "Informerhub-Object-Omitted"
	// HeaderObjectIdentity is, on a change without its object, the
	// object's identity (IdentityOf): which object changed.
	HeaderObjectIdentity = "Informerhub-Object-Identity"
)
