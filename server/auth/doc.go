// Package auth decides who calls the hub and what they may see.
//
// Authenticators identify callers: by a bearer token reviewed by the API
// server (TokenReview), by a verified TLS client certificate
// (ClientCertificate), or not at all (Anonymous, for local development).
// The SubjectAccessReview authorizer then grants a caller exactly what its
// own Kubernetes RBAC grants; decisions are cached briefly, and the server
// asks again for long streams, so revoked access ends them.
//
// RateLimiter and SubscriptionLimiter bound what each identity may use, and
// CertificateReloader rotates the serving certificate without a restart.
package auth
