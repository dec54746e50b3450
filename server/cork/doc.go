// Package cork lets the streams of one connection share its writes.
//
// grpc-go writes a connection's frames from one goroutine, which flushes
// them to the socket whenever it has nothing more to do. When a change goes
// to many streams of one connection, their handlers wake one at a time, and
// each one's message is written alone: one system call per delivery, though
// ten streams share the connection. A Conn holds the connection's writes
// while some of its streams have been woken for events and have not yet
// sent them (an informerhub.Woken the hub keeps for the connection): the
// writes of one change to all of them then leave together, in one system
// call, as TCP_CORK holds a socket's partial segments until uncorked.
//
// A stream whose client stopped reading is never counted, so it holds back
// no other stream of its connection; what is held is written at the latest
// after Config.MaxHold, and at once past Config.MaxHeld bytes, so a reader
// slow to be scheduled delays its connection's writes by MaxHold at most.
//
// Credentials wraps the credentials of a grpc.Server, so that each of its
// connections is a Conn; Wrap makes one of a connection net/http serves
// (the Connect protocol and gRPC-Web, whose HTTP/2 server writes a
// connection's frames from one goroutine too, and flushes as often);
// ConnOf finds a stream's.
package cork
