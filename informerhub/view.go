package informerhub

import (
	"strconv"

	"github.com/informerhub/informerhub/informerhub/projection"
)

// A view is the form in which a subscriber receives objects: whole or
// projected (package projection), with or without the previous state on
// MODIFIED, in one of the transport's encodings. Views are interned per
// feed, so that subscribers that ask for the same form share one view, and
// each record's event in that view is built once for all of them
// (eventMaker.ofRecord). A feed's admission interns them.
type view struct {
	key             string
	proj            *projection.Projection // nil: whole objects
	includePrevious bool
	encoding        Encoding
	refs            int // subscriptions using the view; guarded by its feed's mu
}

// defaultView is the form of every subscriber that asks for nothing else.
// It is not interned: records keep its events apart, without a lock.
var defaultView = &view{}

func viewKey(proj *projection.Projection, includePrevious bool, enc Encoding) string {
	key := strconv.Itoa(int(enc))
	if includePrevious {
		key += "p"
	}
	if proj != nil {
		key += "\n" + proj.Key()
	}
	return key
}
