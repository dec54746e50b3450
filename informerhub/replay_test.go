package informerhub_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/informerhub/informerhub/informerhub"
)

// lowerHalf is a shard selector of the objects whose uid hashes below
// 2^63, and inLowerHalf says which those are, computed here from the
// KEP's definition (FNV-1a, 64 bits, start included, end excluded) rather
// than by the hub's shard package.
const lowerHalf = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"

func inLowerHalf(uid string) bool {
	h := fnv.New64a()
	h.Write([]byte(uid))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], h.Sum64())
	return b[0] < 0x80
}

// TestAShardReplaySendsItsShardOnly: a shard subscriber whose token the
// history no longer holds is replayed from the API server, which the hub
// does not ask to shard (its gate may be off): the replay sends the
// shard's changes, and none of another shard's objects, whose deletes it
// would never send either.
func TestAShardReplaySendsItsShardOnly(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("other", "first", nil, "")) // a token at version 0 could not be replayed
	h := newHub(t, c, informerhub.Config{HistorySize: 4, QueueSize: 2})
	sel := informerhub.Selector{Resource: configMaps, ShardSelector: lowerHalf}
	live := watch(t, h, informerhub.WatchRequest{Selector: sel})
	start := live.ResumeToken()

	var want []ev
	marker := ""
	for i := 0; marker == ""; i++ {
		name := fmt.Sprint("cm-", i)
		c.cms().Add(configMap("ns", name, nil, "v1"))
		if !inLowerHalf("ns/" + name) { // hubtest's uids are namespace/name
			continue
		}
		if i >= 20 {
			marker = "ns/" + name
			break
		}
		want = append(want, ev{Type: "ADDED", Key: "ns/" + name, Data: "v1"})
	}
	if got := collect(t, live, marker); len(got) != len(want) {
		t.Fatalf("the live shard subscriber got %d events, want %d: %v", len(got), len(want), got)
	}

	resumed := watch(t, h, informerhub.WatchRequest{Selector: sel, ResumeToken: start})
	got := collect(t, resumed, marker)
	for i := range got {
		got[i].RV = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the replayed shard (-want +got):\n%s", diff)
	}
	if st := statsOf(t, h); st.Replays != 1 {
		t.Errorf("Replays = %d, want the token replayed from the API server", st.Replays)
	}
}
