package conformance

import (
	"testing"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/test/checker"
)

// TestProtocols: the probes over each protocol but gRPC (every other
// test's): a Snapshot, then a Watch from its token (the initial events'
// probe: a Watch with them), cut mid-way and resumed from its last token.
func TestProtocols(t *testing.T) {
	s := newScenario(t, smallPayload)
	h := startHub(t, cluster.Config, hubConfig())
	runs := map[column][]*probeRun{}
	for _, proto := range testhub.Protocols {
		c, ok := protocolColumns[proto.Name]
		if !ok {
			continue
		}
		for _, p := range probesFor(c) {
			r := newProbeRun(t, s, p, proto.Dial(t, h.Addr))
			if p.initial {
				r.open("", true)
			} else {
				events, token, _ := snapshotEvents(t, r.ctx, r.client, r.req)
				for _, e := range events {
					r.tr.Record(e)
				}
				r.open(token, false)
				r.initial = true // the Snapshot's objects begin the transcript
			}
			runs[c] = append(runs[c], r)
		}
	}
	s.churn(1)
	for _, rs := range runs {
		for _, r := range rs {
			r.awaitEvents(1)
			r.resumeFromLast()
		}
	}
	s.churn(1)
	s.settle()
	for c, rs := range runs {
		for _, r := range rs {
			r.settled()
		}
		t.Run(string(c), func(t *testing.T) { checkAll(t, rs, c, checker.Options{InitialEvents: true}) })
	}
}

// dialProtocol is testhub's dialer of a protocol, as a dialer.
func dialProtocol(p testhub.Protocol) dialer {
	return func(t *testing.T, addr string) informerhubv1.InformerHubServiceClient { return p.Dial(t, addr) }
}
