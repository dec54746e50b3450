package historystore

import (
	"encoding/binary"
	"errors"
	"sort"

	"k8s.io/apiserver/pkg/storage/value"
)

// Object is one Kubernetes object as the hub keeps it: its JSON as the API
// server sent it, and the metadata the hub orders, selects and resumes by,
// stored beside it so that reading a record never parses JSON.
type Object struct {
	Namespace, Name, UID string
	ResourceVersion      uint64
	Labels               map[string]string
	JSON                 string
}

// Types of records, as informerhub numbers its event types.
const (
	TypeAdded    uint8 = 1
	TypeModified uint8 = 2
	TypeDeleted  uint8 = 3
)

// Record is one change.
type Record struct {
	Seq uint64 // its sequence number, the key it is stored under
	// Epoch, RV and Offset are the rest of the position right after it, as
	// its resume token says.
	Epoch uint64
	// RV is the change's resourceVersion (for a relist's differences, the
	// list's); TokenRV the token's, which inside a relist's batch (Offset
	// set) is the version before the batch.
	RV      uint64
	TokenRV uint64
	Offset  uint32
	Type    uint8
	// Received is when the hub took the change, in Unix nanoseconds.
	Received int64
	// FromRelist is set on the differences a relist found.
	FromRelist bool
	// Object is the new state (for TypeDeleted, the final one); Previous
	// the state before, nil for TypeAdded.
	Object   Object
	Previous *Object
}

// recordVersion is the first byte of every stored record: a reader of an
// unknown one refuses it rather than misread it.
const recordVersion = 1

const (
	flagRelist   = 1 << 0
	flagPrevious = 1 << 1
)

var errCorrupt = errors.New("unreadable record (written by a newer informerhub, or damaged)")

// A record's value is its header, which orders and places it (its version,
// type, flags, epoch, resourceVersions, offset and time), then its body:
// its object and previous object, sealed (see seal). Retention and the
// searches by resourceVersion and time read headers only, never opening a
// body. A body written as it is (identity) is the record as it was before
// bodies were sealed.
func appendHeader(b []byte, r *Record) []byte {
	b = append(b, recordVersion, r.Type)
	var flags byte
	if r.FromRelist {
		flags |= flagRelist
	}
	if r.Previous != nil {
		flags |= flagPrevious
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, r.Epoch)
	b = binary.AppendUvarint(b, r.RV)
	b = binary.AppendUvarint(b, r.RV-r.TokenRV) // 0 but inside a relist
	b = binary.AppendUvarint(b, uint64(r.Offset))
	return binary.AppendVarint(b, r.Received)
}

func appendBody(b []byte, r *Record) []byte {
	b = appendObject(b, &r.Object)
	if r.Previous != nil {
		b = appendObject(b, r.Previous)
	}
	return b
}

// readHeader reads a record's header, and returns its flags and its body,
// still sealed.
func readHeader(v []byte) (r Record, flags byte, body []byte, err error) {
	if len(v) < 3+8 || v[0] != recordVersion {
		return Record{}, 0, nil, errCorrupt
	}
	r.Type, flags = v[1], v[2]
	r.FromRelist = flags&flagRelist != 0
	d := decoder[[]byte]{b: v[3:]}
	r.Epoch = d.uint64()
	r.RV = d.uvarint()
	r.TokenRV = r.RV - d.uvarint()
	r.Offset = uint32(d.uvarint())
	r.Received = d.varint()
	if d.bad {
		return Record{}, 0, nil, errCorrupt
	}
	return r, flags, d.b, nil
}

// readBody reads a record's opened body into r: each object in one copy
// (copyObject) with oneCopy, else each string copied on its own.
func readBody(r *Record, flags byte, body []byte, oneCopy bool) error {
	d := decoder[[]byte]{b: body}
	read := func() Object {
		if oneCopy {
			return copyObject(&d)
		}
		return d.object()
	}
	r.Object = read()
	if flags&flagPrevious != 0 {
		prev := read()
		r.Previous = &prev
	}
	if d.bad || len(d.b) != 0 {
		return errCorrupt
	}
	return nil
}

func appendObject(b []byte, o *Object) []byte {
	b = appendString(b, o.Namespace)
	b = appendString(b, o.Name)
	b = appendString(b, o.UID)
	b = binary.AppendUvarint(b, o.ResourceVersion)
	keys := make([]string, 0, len(o.Labels))
	for k := range o.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys) // one object, one encoding
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, o.Labels[k])
	}
	b = binary.AppendUvarint(b, uint64(len(o.JSON)))
	return append(b, o.JSON...)
}

// A state entry is the object itself (stateInline), or the sequence
// number of the newest record, which holds it (statePointer).
const (
	stateInline = 1
	stateRecord = 2
)

// appendStateObject appends the state entry of o: stateInline, then the
// object sealed (see seal).
func appendStateObject(b []byte, o *Object, t value.Transformer, key []byte) ([]byte, error) {
	var plain []byte
	plain = appendObject(plain, o)
	return seal(append(b, stateInline), plain, t, key)
}

func appendStatePointer(b []byte, seq uint64) []byte {
	return binary.AppendUvarint(append(b, stateRecord), seq)
}

// statePointer returns the record a state entry points at, if it does.
func statePointer(v []byte) (uint64, bool) {
	if len(v) < 2 || v[0] != stateRecord {
		return 0, false
	}
	seq, n := binary.Uvarint(v[1:])
	return seq, n == len(v)-1
}

func readStateObject(v []byte, t value.Transformer, key []byte) (Object, error) {
	if len(v) == 0 || v[0] != stateInline {
		return Object{}, errCorrupt
	}
	plain, err := unseal(v[1:], t, key)
	if err != nil {
		return Object{}, err
	}
	// Each string copied on its own: the state is kept (see opening).
	d := decoder[[]byte]{b: plain}
	o := d.object()
	if d.bad || len(d.b) != 0 {
		return Object{}, errCorrupt
	}
	return o, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads what append* wrote from bytes (a Pebble buffer, which
// Pebble reuses: what it returns is copied out) or from a string (what it
// returns shares the string); a short or oversized read sets bad.
type decoder[T ~[]byte | ~string] struct {
	b   T
	bad bool
}

// copyObject reads a record's object out of d's buffer in one copy: its
// encoding becomes one string, which the object's strings share, so an
// object read costs one allocation, not one per string and label (records
// are read by the thousand to catch subscribers up, and dropped once
// sent). Its strings keep alive only its own bytes, but all of them: not
// for objects the hub keeps (see opening).
func copyObject(d *decoder[[]byte]) Object {
	skip := decoder[[]byte]{b: d.b}
	skip.skipObject()
	if skip.bad {
		d.bad, d.b = true, nil
		return Object{}
	}
	n := len(d.b) - len(skip.b)
	one := decoder[string]{b: string(d.b[:n])}
	d.b = d.b[n:]
	o := one.object()
	d.bad = one.bad
	return o
}

func (d *decoder[T]) object() Object {
	var o Object
	o.Namespace = d.string()
	o.Name = d.string()
	o.UID = d.string()
	o.ResourceVersion = d.uvarint()
	if n := d.uvarint(); n > 0 && n <= uint64(len(d.b)) {
		o.Labels = make(map[string]string, n)
		for range n {
			k := d.string()
			o.Labels[k] = d.string()
		}
	} else if n > 0 {
		d.bad = true
	}
	o.JSON = d.string()
	return o
}

// skipObject moves past an object without reading it.
func (d *decoder[T]) skipObject() {
	d.skip() // namespace
	d.skip() // name
	d.skip() // uid
	d.uvarint()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, d.b[:0]
		return
	}
	for range 2 * n {
		d.skip()
	}
	d.skip() // JSON
}

func (d *decoder[T]) uvarint() uint64 {
	var v uint64
	for i := 0; i < len(d.b) && i < binary.MaxVarintLen64; i++ {
		c := d.b[i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			break // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			d.b = d.b[i+1:]
			return v
		}
	}
	d.bad, d.b = true, d.b[:0]
	return 0
}

func (d *decoder[T]) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (d *decoder[T]) uint64() uint64 {
	if len(d.b) < 8 {
		d.bad, d.b = true, d.b[:0]
		return 0
	}
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(d.b[i])
	}
	d.b = d.b[8:]
	return v
}

// string returns the next string: a copy when d reads bytes, a part of
// d's string when it reads a string.
func (d *decoder[T]) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, d.b[:0]
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder[T]) skip() {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, d.b[:0]
		return
	}
	d.b = d.b[n:]
}
