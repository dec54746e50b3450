package selection

import (
	"strconv"

	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// A view is the form in which a subscriber receives objects: whole or
// projected (package projection), with or without the previous state on
// MODIFIED, in one of the transport's encodings. Views are interned per
// feed, so that subscribers that ask for the same form share one view, and
// each record's event in that view is built once for all of them
// (feed.Events.OfRecord). A feed's admission interns them.
type View struct {
	key             string
	proj            *projection.Projection // nil: whole objects
	includePrevious bool
	encoding        event.Encoding
	refs            int // subscriptions using the view; guarded by its feed's mu
}

// Key identifies the view: views of equal keys are the same form.
func (v *View) Key() string { return v.key }

// Projection is the fields it keeps; nil keeps whole objects.
func (v *View) Projection() *projection.Projection { return v.proj }

// IncludePrevious says whether its MODIFIED events carry the previous
// state.
func (v *View) IncludePrevious() bool { return v.includePrevious }

// Encoding is the transport's encoding of its events.
func (v *View) Encoding() event.Encoding { return v.encoding }

// DefaultView is the form of every subscriber that asks for nothing else.
// It is not interned: records keep its events apart, without a lock.
var DefaultView = &View{}

func viewKey(proj *projection.Projection, includePrevious bool, enc event.Encoding) string {
	key := strconv.Itoa(int(enc))
	if includePrevious {
		key += "p"
	}
	if proj != nil {
		key += "\n" + proj.Key()
	}
	return key
}
