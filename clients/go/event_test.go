package hubclient

import (
	"testing"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// An event carries the hub's from_relist mark.
func TestEventOfCarriesFromRelist(t *testing.T) {
	for _, mark := range []bool{false, true} {
		e := eventOf(&informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_MODIFIED, Object: "{}", ResourceVersion: "5", FromRelist: mark})
		if e.FromRelist != mark {
			t.Errorf("from_relist %v became FromRelist %v", mark, e.FromRelist)
		}
	}
}
