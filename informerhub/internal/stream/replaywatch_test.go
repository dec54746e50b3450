package stream

import (
	"errors"
	"log/slog"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// TestAReplayDropsOnlyARefusedFieldSelector: a 400 that refuses the field
// selector (as built-in types, CRDs and types without fields of their own
// word it) makes the replay ask without it; any other 400 is the API
// server's refusal to serve the replay, UNAVAILABLE, and blames no part of
// the client's request.
func TestAReplayDropsOnlyARefusedFieldSelector(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	deps := &feed.Deps{Log: log, Memory: memory.New(1<<30, log, nil), Limits: &selection.Limits{}}
	info := upstream.ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}
	u := &replayWatch{feed: feed.New(deps, info, &feed.Counters{})}
	for _, tc := range []struct {
		err     error
		refused bool
	}{
		{apierrors.NewBadRequest("field label not supported: spec.color"), true},
		{apierrors.NewBadRequest(`"spec.color" is not a known field selector: only "metadata.name", "metadata.namespace"`), true},
		{apierrors.NewBadRequest("the provided continue parameter is too old to display a consistent list result"), false},
		{apierrors.NewBadRequest("unable to parse requirement: found '', expected: ')'"), false},
	} {
		err := u.apiError(tc.err)
		var refused *selectorRefusedError
		if got := errors.As(err, &refused); got != tc.refused {
			t.Errorf("%v: a refusal of the field selector: %v, want %v", tc.err, got, tc.refused)
		}
		if !tc.refused && !errors.Is(err, errs.ErrUnavailable) {
			t.Errorf("%v: %v, want errs.ErrUnavailable", tc.err, err)
		}
	}
}
