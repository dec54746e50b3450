package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dockerfile string
		wantStatus int
		wantOutput string // in stdout or stderr
	}{
		{
			name:       "a clean file passes",
			dockerfile: "FROM golang:1.26.8-bookworm AS build\nARG VERSION=dev\nRUN go version\nFROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /usr/local/go/bin/go /go\nUSER 65532:65532\nENTRYPOINT [\"/go\"]\n",
		},
		{
			name:       "lower-case as after upper-case FROM",
			dockerfile: "FROM golang as build\nRUN true\n",
			wantStatus: 1,
			wantOutput: "FromAsCasing",
		},
		{
			name:       "MAINTAINER",
			dockerfile: "FROM scratch\nMAINTAINER someone@example.com\n",
			wantStatus: 1,
			wantOutput: "MaintainerDeprecated",
		},
		{
			name:       "shell-form ENTRYPOINT",
			dockerfile: "FROM scratch\nENTRYPOINT /app\n",
			wantStatus: 1,
			wantOutput: "JSONArgsRecommended",
		},
		{
			name:       "a secret in ENV",
			dockerfile: "FROM scratch\nENV API_TOKEN=abc\n",
			wantStatus: 1,
			wantOutput: "SecretsUsedInArgOrEnv",
		},
		{
			name:       "a check directive skips a rule",
			dockerfile: "# check=skip=JSONArgsRecommended\nFROM scratch\nENTRYPOINT /app\n",
		},
		{
			name:       "check=error=true still reports the finding",
			dockerfile: "# check=error=true\nFROM scratch\nMAINTAINER someone@example.com\n",
			wantStatus: 1,
			wantOutput: "MaintainerDeprecated",
		},
		{
			name:       "an unknown instruction",
			dockerfile: "FROM scratch\nFOO bar\n",
			wantStatus: 1,
			wantOutput: "unknown instruction: FOO",
		},
		{
			name:       "an empty file",
			wantStatus: 1,
			wantOutput: "cannot be empty",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(path, []byte(tc.dockerfile), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			status := run([]string{path}, &stdout, &stderr)
			output := stdout.String() + stderr.String()
			if status != tc.wantStatus {
				t.Errorf("status %d, want %d; output:\n%s", status, tc.wantStatus, output)
			}
			if tc.wantOutput != "" && !strings.Contains(output, tc.wantOutput) {
				t.Errorf("output does not mention %q:\n%s", tc.wantOutput, output)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if status := run(nil, &stdout, &stderr); status != 2 {
		t.Errorf("no files: status %d, want 2", status)
	}
	if status := run([]string{"-build-arg", "novalue", "Dockerfile"}, &stdout, &stderr); status != 2 {
		t.Errorf("a build argument without =: status %d, want 2", status)
	}
}
