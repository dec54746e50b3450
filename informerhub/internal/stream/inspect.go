package stream

// What the hub's tests observe of a stream, between calls of Next.

// Replaying reports whether the stream still reads its replay's upstream
// watch.
func (s *Stream) Replaying() bool {
	_, ok := s.phase.(*replay)
	return ok
}

// InitialEventsExamined counts the objects the stream's initial events
// have tested against its selector so far; call it before they end.
func (s *Stream) InitialEventsExamined() int { return s.phase.(*initialPhase).cursor.examined }

// Pending counts the deliveries waiting in the stream's queue.
func (s *Stream) Pending() int { return s.lease.Reader().Pending() }
