package historystore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

// The objects of a record or a state entry are sealed with the resource
// type's value.Transformer, as the API server seals what it writes to etcd
// (k8s.io/apiserver's EncryptionConfiguration providers: aesgcm, aescbc,
// secretbox, KMS v2, identity), rather than with crypto of the store's own:
// the same configuration file, the same keys and key rotation, and code
// that the API server's users already trust.
//
// The authenticated data is the key the value is stored under, which
// names its resource type and its place (sequence number, or namespace and
// name), as the API server authenticates a value with its etcd key: a
// value moved to another record, another object or another resource type
// does not read. aesgcm and KMS v2 authenticate it; aescbc and secretbox
// ignore it, so an encrypted value also carries its key inside what is
// encrypted, and reading checks it. A transformer that writes values as
// they are (identity) writes them as they were before sealing existed,
// without the key.
//
// A nil transformer is identity: it writes values as they are, and, as the
// API server's identity provider does, refuses to read an encrypted one.

// encryptedPrefix starts every value an encrypting provider writes; the
// API server's identity provider refuses to read what starts with it.
var encryptedPrefix = []byte("k8s:enc:")

// ErrUndecryptable reports a value the resource type's transformer cannot
// read: encrypted with a key or provider the encryption configuration no
// longer lists (or with none given), or moved from another key.
var ErrUndecryptable = errors.New("cannot decrypt the history on disk with the encryption configuration")

// seal appends to dst plain as stored under key through t.
func seal(dst, plain []byte, t value.Transformer, key []byte) ([]byte, error) {
	if t == nil {
		return append(dst, plain...), nil
	}
	bound := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(key)+len(plain)), uint64(len(key)))
	bound = append(append(bound, key...), plain...)
	out, err := t.TransformToStorage(context.Background(), bound, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("encrypting for the history on disk: %w", err)
	}
	if bytes.Equal(out, bound) {
		return append(dst, plain...), nil // identity: as it is, without the key
	}
	return append(dst, out...), nil
}

// unseal returns what seal wrote as stored under key through t. What it
// returns may alias stored.
func unseal(stored []byte, t value.Transformer, key []byte) ([]byte, error) {
	if t == nil {
		t = identity.NewEncryptCheckTransformer()
	}
	out, _, err := t.TransformFromStorage(context.Background(), stored, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUndecryptable, err)
	}
	if !bytes.HasPrefix(stored, encryptedPrefix) {
		return out, nil // written as it is
	}
	n, k := binary.Uvarint(out)
	if k <= 0 || n > uint64(len(out)-k) || !bytes.Equal(out[k:k+int(n)], key) {
		return nil, fmt.Errorf("%w: the value was encrypted for another place in the store", ErrUndecryptable)
	}
	return out[k+int(n):], nil
}
