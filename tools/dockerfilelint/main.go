// Command dockerfilelint checks Dockerfiles with BuildKit's own linter: the
// rules of `docker build --check` (https://docs.docker.com/go/dockerfile/rule/),
// without a Docker engine or a BuildKit daemon. It exits 1 when a file has a
// finding or does not parse, so that `make lint` fails.
//
//	dockerfilelint [-build-arg NAME=VALUE]... Dockerfile...
//
// A file configures the rules as it does for `docker build`, with a check
// directive on its first line: `# check=skip=JSONArgsRecommended`,
// `# check=experimental=all`.
//
// Base images are not pulled: each resolves to an empty image of the
// platform asked for. The rules that read a base image's configuration
// (InvalidBaseImagePlatform; UndefinedVar for variables the base image
// defines, other than PATH) therefore cannot fire here, and CopyIgnoredFile,
// which needs the build context, neither. All the others run as in
// `docker build --check`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerui"
	"github.com/opencontainers/go-digest"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dockerfilelint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	buildArgs := map[string]string{}
	fs.Func("build-arg", "a build argument, `NAME=VALUE`, as for docker build (repeatable)", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("want NAME=VALUE, not %q", v)
		}
		buildArgs[name] = value
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: dockerfilelint [-build-arg NAME=VALUE]... Dockerfile...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	status := 0
	for _, path := range fs.Args() {
		findings, err := lintFile(context.Background(), path, buildArgs, stdout)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "dockerfilelint: %s: %v\n", path, err)
			status = 1
		case findings > 0:
			fmt.Fprintf(stderr, "dockerfilelint: %s: %d finding(s)\n", path, findings)
			status = 1
		}
	}
	return status
}

// lintFile prints the findings in path as `docker build --check` does and
// returns how many there are; a file that does not parse or convert is an
// error.
func lintFile(ctx context.Context, path string, buildArgs map[string]string, out io.Writer) (int, error) {
	dt, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sourceMap := llb.NewSourceMap(nil, path, "Dockerfile", dt)
	sourceMap.Definition = &llb.Definition{} // no build context: the file is the only source
	results, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		Config:       dockerui.Config{BuildArgs: buildArgs},
		SourceMap:    sourceMap,
		MetaResolver: emptyImages{},
	})
	if err != nil {
		return 0, err
	}
	if err := results.PrintTo(out, nil); err != nil {
		return 0, err
	}
	if results.Error != nil {
		results.PrintErrorTo(out, nil)
		return len(results.Warnings), errors.New(results.Error.Message)
	}
	return len(results.Warnings), nil
}

// emptyImages resolves every base image to an empty image of the platform
// asked for, instead of asking its registry.
type emptyImages struct{}

func (emptyImages) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	img := ocispecs.Image{
		Platform: ocispecs.Platform{OS: "linux", Architecture: "amd64"},
		RootFS:   ocispecs.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromString(ref)}},
	}
	if opt.ImageOpt != nil && opt.ImageOpt.Platform != nil {
		img.Platform = *opt.ImageOpt.Platform
	}
	dt, err := json.Marshal(img)
	return ref, "", dt, err
}
