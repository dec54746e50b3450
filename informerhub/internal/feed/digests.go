package feed

import (
	"github.com/google/btree"

	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// namespaceDigests are the digests of a set of objects per namespace.
type namespaceDigests map[string]*digest.Set

func (d namespaceDigests) add(ns string, h digest.Hash) {
	set := d[ns]
	if set == nil {
		set = &digest.Set{}
		d[ns] = set
	}
	set.Add(h)
}

// remove takes out a hash that was added, and the namespace with its last
// object: namespaces that come and go leave nothing behind.
func (d namespaceDigests) remove(ns string, h digest.Hash) {
	set := d[ns]
	if set == nil {
		return
	}
	set.Remove(h)
	if set.Count() == 0 {
		delete(d, ns)
	}
}

// total is the digest of them all.
func (d namespaceDigests) total() digest.Set {
	var all digest.Set
	for _, set := range d {
		all.Merge(*set)
	}
	return all
}

// stateDigests are the digests of a store's state, in all and per
// namespace, kept up with every change to it (store.put, delete, sync and
// applyAll) at the cost of the object hashes NewObject computed: so that
// a Digest of a whole namespace or type costs no scan of it. Each
// consistency check compares them with its clone's, and repairs them. The
// feed's lock guards them, as the rest of the store.
type stateDigests struct {
	all         digest.Set
	byNamespace namespaceDigests
}

// digestsOf are the digests of a state.
func digestsOf(objects *btree.BTreeG[*state.Object]) stateDigests {
	d := stateDigests{byNamespace: namespaceDigests{}}
	objects.Ascend(func(o *state.Object) bool {
		d.add(o)
		return true
	})
	return d
}

func (d *stateDigests) add(o *state.Object) {
	h := o.Hash()
	d.all.Add(h)
	d.byNamespace.add(o.Namespace, h)
}

func (d *stateDigests) remove(o *state.Object) {
	h := o.Hash()
	d.all.Remove(h)
	d.byNamespace.remove(o.Namespace, h)
}

// of is the digest of a namespace's objects; of "", of all.
func (d *stateDigests) of(namespace string) digest.Set {
	if namespace == "" {
		return d.all
	}
	if set := d.byNamespace[namespace]; set != nil {
		return *set
	}
	return digest.Set{}
}
