// Package selection is what a subscriber asks for, parsed and bounded:
// the Selector (namespace, label, field and shard selectors, a CEL
// filter), which owns both what the API server evaluates for it
// (UpstreamQuery, the one place that says which parts) and what the hub
// matches itself (Matches, Given, Variant, Trigger); the Evaluation of
// filters a change shares among the subscribers it concerns; the View,
// the form objects are sent in; and a resource type's Admission of
// filters, projections and views within the hub's Limits.
//
// A parsed Selector is immutable; an Admission has no lock of its own,
// and its feed's lock guards it. It imports the core's state, events and
// errors, never its root.
package selection
