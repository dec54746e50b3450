package informerhub

// ForgeToken makes a resume token at any position, for tests of the cases a
// client cannot produce on demand, such as tokens of other feed instances.
func ForgeToken(resource string, epoch, seq, rv uint64, offset uint32) string {
	return (&token{resource: resource, pos: position{epoch: epoch, seq: seq, rv: rv, offset: offset}}).encode()
}
