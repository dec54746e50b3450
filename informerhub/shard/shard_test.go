package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/sharding"
)

// bound is a random shard bound as a client might write one: 16 digits
// mostly, and now and then fewer or more, which the API server compares by
// length first.
func bound(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return fmt.Sprintf("0x%x", r.Uint64N(16))
	case 1:
		return "0x10000000000000000"
	case 2:
		return fmt.Sprintf("0x%x", r.Uint64()) // as many digits as it takes
	default:
		return fmt.Sprintf("0x%016x", r.Uint64())
	}
}

func randomSelector(r *rand.Rand) string {
	key := KeyUID
	if r.IntN(2) == 0 {
		key = KeyNamespace
	}
	var parts []string
	for range 1 + r.IntN(3) {
		for {
			start, end := bound(r), bound(r)
			if _, err := sharding.Parse(fmt.Sprintf("shardRange(%s, '%s', '%s')", key, start, end)); err == nil {
				parts = append(parts, fmt.Sprintf("shardRange(%s, '%s', '%s')", key, start, end))
				break
			}
		}
	}
	return strings.Join(parts, " || ")
}

// TestSelectsWhatTheAPIServerSelects compares Matches with the API server's
// own selector (k8s.io/apimachinery/pkg/sharding) on random selectors and
// objects.
func TestSelectsWhatTheAPIServerSelects(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 800 {
		expr := randomSelector(r)
		ours, err := Parse(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		theirs, err := sharding.Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		if ours.String() != theirs.String() {
			t.Fatalf("%s: String %q, the API server's %q", expr, ours.String(), theirs.String())
		}
		for range 20 {
			uid, ns := fmt.Sprintf("%08x-%04x", r.Uint32(), r.Uint32N(1<<16)), fmt.Sprint("ns-", r.IntN(50))
			if r.IntN(10) == 0 {
				ns = "" // cluster-scoped
			}
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: ns}}
			want, err := theirs.Matches(obj)
			if err != nil {
				t.Fatal(err)
			}
			if got := ours.Matches(uid, ns); got != want {
				t.Fatalf("%s on uid %s, namespace %q: %v, the API server's %v", expr, uid, ns, got, want)
			}
		}
	}
}

func TestInvalidSelectors(t *testing.T) {
	for _, expr := range []string{
		"",
		"shardRange(object.metadata.name, '0x0', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
		"shardRange(object.metadata.uid, '0x1', '0x1')",
		"shardRange(object.metadata.uid, '0xzz', '0x1')",
		"shardRange(object.metadata.uid, '12', '0x1')",
		"shardRange(object.metadata.uid, '0x0')",
		"shardRange(object.metadata.uid, '0x0', '0x8000000000000000') && true",
		"shardRange(object.metadata.uid, '0x0', '0x8') || shardRange(object.metadata.namespace, '0x0', '0x8')",
		"object.metadata.uid == 'x'",
	} {
		if _, err := Parse(expr); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v, want ErrInvalid", expr, err)
		}
	}
}

// TestIndexFindsEveryEntryThatSelects compares Index.Lookup with each
// entry's Matches, as entries come and go.
func TestIndexFindsEveryEntryThatSelects(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var x Index[int]
	live := map[int]*Selector{}
	for step := range 300 {
		if len(live) > 0 && r.IntN(3) == 0 {
			for v := range live {
				x.Remove(v)
				delete(live, v)
				break
			}
		} else {
			s, err := Parse(randomSelector(r))
			if err != nil {
				t.Fatal(err)
			}
			x.Add(step, s)
			live[step] = s
		}
		for range 20 {
			uid, ns := fmt.Sprint(r.Uint64()), fmt.Sprint("ns-", r.IntN(20))
			var want, got []int
			for v, s := range live {
				if s.Matches(uid, ns) {
					want = append(want, v)
				}
			}
			x.Lookup(uid, ns, func(v int) { got = append(got, v) })
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d, uid %s, namespace %s: Lookup %v, Matches %v", step, uid, ns, got, want)
			}
		}
	}
	if x.Len() != len(live) {
		t.Fatalf("Len %d, want %d", x.Len(), len(live))
	}
}

// TestShardsPartitionTheHashes: four shards of [0, 2^64) select every
// object exactly once.
func TestShardsPartitionTheHashes(t *testing.T) {
	bounds := []string{"0x0000000000000000", "0x4000000000000000", "0x8000000000000000", "0xc000000000000000", "0x10000000000000000"}
	var x Index[int]
	for i := range 4 {
		s, err := Parse(fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", bounds[i], bounds[i+1]))
		if err != nil {
			t.Fatal(err)
		}
		x.Add(i, s)
	}
	seen := make([]int, 4)
	for i := range 10000 {
		n := 0
		x.Lookup(fmt.Sprint("uid-", i), "", func(v int) { seen[v]++; n++ })
		if n != 1 {
			t.Fatalf("uid-%d is in %d shards", i, n)
		}
	}
	for i, n := range seen { // FNV-1a spreads these names unevenly: some, not a quarter
		if n == 0 {
			t.Errorf("shard %d has none of 10000 objects", i)
		}
	}
}
