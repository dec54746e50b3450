package server

import (
	"context"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// Digest answers the digest of a selection at a position: admitted as a
// Snapshot is (its access, a stream slot while it scans).
func (s *Server) Digest(ctx context.Context, req *informerhubv1.DigestRequest) (*informerhubv1.DigestResponse, error) {
	sel, release, err := s.admit(ctx, req.GetSelector())
	if err != nil {
		return nil, toStatus(s.log, err)
	}
	defer release()
	d, err := s.hub.Digest(ctx, informerhub.DigestRequest{Selector: sel, ResumeToken: req.GetResumeToken()})
	if err != nil {
		return nil, toStatus(s.log, err)
	}
	return &informerhubv1.DigestResponse{Count: d.Count, Digest: d.Digest, ResourceVersion: d.ResourceVersion,
		ResumeToken: d.ResumeToken, Moved: d.Moved}, nil
}
