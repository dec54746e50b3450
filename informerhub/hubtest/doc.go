// Package hubtest provides an in-memory cluster for unit tests of code built
// on package informerhub: a Resolver and a Source backed by client-go's
// FakeControllerSource, one per resource type.
//
// The fake models sequential resourceVersions and a 410 after ResetWatch.
// It is for testing logic, never proof of behaviour against a real API
// server; the integration tests give that.
package hubtest
