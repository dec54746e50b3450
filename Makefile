# informerhub. `make run` and `make test` work on a fresh machine with Go and
# the Go module proxy: every tool and the Kubernetes control plane are built
# from pinned sources into .cache/ (git-ignored) on first use.

SHELL := /usr/bin/env bash -o pipefail -c
.DEFAULT_GOAL := build

CACHE        := $(CURDIR)/.cache
TOOLS        := $(CACHE)/tools/bin
K8S_VERSION  := v1.37.1
CONTROLPLANE := $(CACHE)/controlplane/$(K8S_VERSION)
LISTEN       ?= 127.0.0.1:8080
METRICS_LISTEN ?= 127.0.0.1:9090
# What `informerhub --version` and the informerhub_build_info metric say.
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION     ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS      := -X main.version=$(VERSION) -X main.revision=$(REVISION)

export PATH := $(TOOLS):$(PATH)
export KUBEBUILDER_ASSETS := $(CONTROLPLANE)

K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37

.PHONY: build
build: ## Build bin/informerhub and bin/hubctl.
	@echo "==> building bin/informerhub and bin/hubctl (about 3 min the first time; seconds after)"
	go build -trimpath -ldflags "$(LDFLAGS)" -o bin/ ./cmd/informerhub ./cmd/hubctl

# `make run` builds only what it runs, or what its hints use (kubectl and
# grpcurl), each once, saying what it builds and about how long that takes
# the first time; its hints are printed once the hub answers /readyz.
# Change the ports with `make run LISTEN=127.0.0.1:8081 METRICS_LISTEN=127.0.0.1:9091`.
define RUN_HINTS
informerhub is serving on $(LISTEN) (gRPC, Connect, gRPC-Web and the console),
authenticating callers with the local API server. In another terminal, as
the demo identity demo/explorer (ClusterRole view: everything but Secrets):

  export PATH=$$PWD/.cache/tools/bin:$$PATH KUBECONFIG=$$PWD/.cache/run/kubeconfig
  export AUTH="authorization: Bearer $$(cat .cache/run/token)"
  grpcurl -plaintext -H "$$AUTH" $(LISTEN) informerhub.v1.InformerHubService/ListResources
  bin/hubctl --hub $(LISTEN) --insecure --token-file .cache/run/token watch configmaps -n demo
  kubectl -n demo create configmap hello --from-literal=a=b

The console: http://$(LISTEN)/ (sign in with the token in .cache/run/token)
Metrics and probes: http://$(METRICS_LISTEN)/metrics, /healthz, /readyz
etcd, the token signing key and the hub's history are kept in .cache/run/:
restarted, make run accepts the same tokens; rm -rf .cache/run starts afresh.
Ctrl-C stops the hub and the control plane.
endef
export RUN_HINTS

.PHONY: run
run: run-intro controlplane build bin/devcluster $(TOOLS)/kubectl $(TOOLS)/grpcurl ## Start a local kube-apiserver and etcd, and the hub (LISTEN=127.0.0.1:8080, METRICS_LISTEN=127.0.0.1:9090).
	@echo "==> starting kube-apiserver and etcd (seconds), then the hub; the hints follow once it serves"
	bin/devcluster -kubeconfig .cache/run/kubeconfig -token .cache/run/token -etcd-dir .cache/run/etcd -service-account-key .cache/run/sa-signer.key \
		-ready-url http://$(METRICS_LISTEN)/readyz -ready-message "$$RUN_HINTS" -- \
		bin/informerhub --listen $(LISTEN) --console --metrics-listen $(METRICS_LISTEN) --history-dir .cache/run/history --retain configmaps

.PHONY: run-intro
run-intro:
	@echo "==> make run: builds what it has not built yet (the first time about 13 min on 2 cores with empty Go caches),"
	@echo "    then starts kube-apiserver, etcd and the hub on $(LISTEN); Ctrl-C stops them"

.PHONY: bin/devcluster
bin/devcluster:
	@echo "==> building bin/devcluster, which starts the control plane (about 4 min the first time: envtest and its dependencies)"
	go build -o bin/devcluster ./cmd/devcluster

# The modules of the repository: the server (.), the generated API (gen),
# and the Go SDK (clients/go).
MODULES := . gen clients/go

.PHONY: test
test: lint check-generate controlplane $(TOOLS)/kubectl nats-server chart-tools node-deps web-deps python-deps browser-deps ## Lint, check generated code, run every test with -race.
	go test -race -count=1 -timeout 20m ./...
	cd clients/go && go test -race -count=1 ./...
	cd clients/web && npm run typecheck && npm test
	cd console && npm run typecheck && npm test
	cd tools/dockerfilelint && go test -count=1 ./...
	$(MAKE) bench-smoke

# The clients in other languages (clients/node, clients/python) are tested
# by test/clients against the control plane and the hub; these install
# what they need.
NODE_MODULES := clients/node/node_modules/.package-lock.json

.PHONY: node-deps
node-deps: $(NODE_MODULES) ## Install the Node.js client's packages from the npm registry (npm ci).
$(NODE_MODULES): clients/node/package.json clients/node/package-lock.json clients/node/.npmrc
	cd clients/node && npm ci --no-audit --no-fund
	touch $@

# The web client (clients/web) and the console (console/, built into
# server/console/dist): TypeScript on connect-es, pinned by their
# package-locks. Building the hub needs neither: their output is committed.
WEB_MODULES := clients/web/node_modules/.package-lock.json console/node_modules/.package-lock.json

.PHONY: web-deps
web-deps: $(WEB_MODULES) ## Install the web client's and the console's packages from the npm registry (npm ci).
clients/web/node_modules/.package-lock.json: clients/web/package.json clients/web/package-lock.json clients/web/.npmrc
	cd clients/web && npm ci --no-audit --no-fund
	touch $@
console/node_modules/.package-lock.json: console/package.json console/package-lock.json console/.npmrc clients/web/node_modules/.package-lock.json
	cd console && npm ci --no-audit --no-fund
	touch $@

# The browser tests (test/browser) drive Debian's chromium, headless.
.PHONY: browser-deps
browser-deps: ## Install Debian's chromium and curl for the browser and plain-HTTP tests.
	test/browser/install-deps.sh

.PHONY: python-deps
python-deps: ## Install the Debian packages of the Python client (python3-grpcio, python3-protobuf, python3-grpc-tools).
	clients/python/install-deps.sh

# The benchmarks behind BENCHMARKS.md. `make test` runs each once at its
# smallest (bench-smoke; the harness's own smoke test, TestHarnessSmoke,
# runs with the other tests) so that none of them rots.
GO_BENCHMARKS := ^(BenchmarkFanOut|BenchmarkGRPCFanOut|BenchmarkConnectFanOut|BenchmarkSnapshot|BenchmarkGRPCSnapshot|BenchmarkDigest|BenchmarkOneObjectEach|BenchmarkNodeAgents|BenchmarkFilter|BenchmarkProjection|BenchmarkDiskHistory|BenchmarkWatchMany|BenchmarkShards|BenchmarkCount)$$
BENCH_RUNS    ?= 3
BENCH_RESULTS := test/bench/results

.PHONY: bench
bench: build controlplane ## Measure the hub beside the API server; write BENCHMARKS.md and test/bench/results (about 40 min; not in CI).
	mkdir -p $(BENCH_RESULTS)
	go test -run '^$$' -bench '$(GO_BENCHMARKS)' -benchmem -count $(BENCH_RUNS) ./informerhub ./server | tee $(BENCH_RESULTS)/go-bench.txt
	go run ./test/bench/cmd/hubbench -hub bin/informerhub -runs $(BENCH_RUNS) -results $(BENCH_RESULTS) -markdown BENCHMARKS.md -notes test/bench/improvements.md \
		-go-bench $(BENCH_RESULTS)/go-bench.txt -go-bench-command "go test -run '^\$$' -bench '$(GO_BENCHMARKS)' -benchmem -count $(BENCH_RUNS) ./informerhub ./server"
	cd tools/benchplot && go run . -plots ../../$(BENCH_RESULTS)/plots.json

.PHONY: bench-smoke
bench-smoke: ## Run every Go benchmark once, at a single iteration.
	go test -run '^$$' -bench '$(GO_BENCHMARKS)' -benchtime 1x -short ./informerhub ./server

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane.
	go test -race -count=1 ./informerhub/... ./server/... ./cmd/hubctl/...
	cd clients/go && go test -race -count=1 ./...

# The fault suite (test/integration/reliability_test.go) runs once in `make
# test`. Faults are races against timing; soak runs it many times over,
# which is too long for CI (about 6 minutes on 2 cores).
FAULT_TESTS := TestAPIServerKilledAndRestarted|TestCompactionForcesARelist|TestHubKilledAndRestarted|TestClientsMoveBetweenReplicas|TestNetworkToTheAPIServerStallsAndDrops|TestStalledAndSlowSubscribers|TestManySubscribeCycles|TestTokensOutliveTheHub|TestAnAuthOutageEndsNoStream|TestAFeedThatLostItsRBACEndsItsStreams|TestATokenFloodDrainsNothing|TestAGapWhileTheHubWasDownIsMarkedFromRelist
SOAK_COUNT  ?= 10
# Scale tests run in `make test` at a size that takes seconds; soak runs
# them at the size their issues name (-full-size), without the race
# detector, which would make them take many minutes.
SCALE_TESTS := TestALargeRelistEndsNoSubscriber|TestRechecksScaleWithIdentitiesNotStreams|TestADrainedReplicaHandsItsStreamsOver|TestADurableHubKilledDuringWrites|TestAnExportOutlastsASinkThatRefuses

.PHONY: soak
soak: build controlplane ## Run the fault suite SOAK_COUNT times, the scale tests once at full size, and 100,000 streams on one hub (not in CI).
	go test -race -count=$(SOAK_COUNT) -run '^($(FAULT_TESTS))$$' ./test/integration/
	go test -count=1 -timeout 30m -run '^($(SCALE_TESTS))$$' ./test/integration/ -full-size
	go test -race -count=1 -timeout 60m ./test/conformance/ -full-size
	@soak=$$(mktemp -d) && trap 'rm -rf "$$soak"' EXIT && \
	go run ./test/bench/cmd/hubbench -hub bin/informerhub -only streams -runs 1 -results "$$soak" -markdown "$$soak/streams.md" && \
	sed -n '/^## 16\./,/^## /p' "$$soak/streams.md"

# docs/conformance.md is the matrix test/conformance declares; make test
# fails while it is stale.
.PHONY: conformance-doc
conformance-doc: ## Write docs/conformance.md from test/conformance's matrix.
	go test ./test/conformance -count=1 -run '^TestTheMatrixIsDocumented$$' -update

.PHONY: fuzz
# -fuzzminimizetime caps minimization, which can stall (golang/go#48820).
fuzz: ## Fuzz token decoding, request validation, projection, filters, the JSON scanner and the ingest decoder, a minute each; keep what fails in testdata/fuzz.
	go test -run '^$$' -fuzz '^FuzzDecodeToken$$' -fuzztime 1m -fuzzminimizetime 2s ./informerhub/
	go test -run '^$$' -fuzz '^FuzzDecodeTokenBody$$' -fuzztime 1m -fuzzminimizetime 2s ./informerhub/
	go test -run '^$$' -fuzz '^FuzzRequestValidation$$' -fuzztime 1m -fuzzminimizetime 2s ./informerhub/
	go test -run '^$$' -fuzz '^FuzzProjection$$' -fuzztime 1m -fuzzminimizetime 2s ./informerhub/projection/
	go test -run '^$$' -fuzz '^FuzzFilter$$' -fuzztime 1m -fuzzminimizetime 2s ./informerhub/celfilter/
	go test -run '^$$' -fuzz '^FuzzScan$$' -fuzztime 1m -fuzzminimizetime 2s ./internal/jsonscan/
	go test -run '^$$' -fuzz '^FuzzDecodeHeader$$' -fuzztime 1m -fuzzminimizetime 2s ./internal/kubejson/
	go test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime 1m -fuzzminimizetime 2s ./internal/kubejson/

# api/released.json is the API of the last release, as a buf image: the
# contract outside clients are written against. `make lint` refuses any
# change to proto/ that would break them (additions only); `make
# release-api` records the current API when a release is cut.
RELEASED_API := api/released.json

.PHONY: lint
lint: tools ## buf lint, format and breaking (against the released API), go vet, gofmt, go mod tidy.
	buf lint
	buf format -d --exit-code
	buf breaking --against $(RELEASED_API)
	dockerfilelint Dockerfile
	for m in $(MODULES); do (cd $$m && go vet ./...) || exit 1; done
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' | grep -v '^gen/')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	for m in $(MODULES) tools tools/controlplane tools/benchplot tools/dockerfilelint tools/helm tools/promtool tools/nats; do (cd $$m && go mod tidy -diff) || exit 1; done
	cd tools/benchplot && go vet ./...
	cd tools/dockerfilelint && go vet ./...
	cd tools/promtool && go vet ./...

.PHONY: release-api
release-api: tools ## Record proto/ as the released API that buf breaking guards (when cutting a release).
	buf build -o $(RELEASED_API)

.PHONY: release
release: tools ## Cut release RELEASE=vX.Y.Z: record the API, point clients/go at gen's RELEASE, commit, and tag the repository, gen and clients/go (push them yourself).
	tools/release.sh $(RELEASE)

.PHONY: generate
generate: tools web-deps ## Generate gen/ from proto/, the web client's code and bundle, and the console's bundle.
	rm -rf gen/informerhub
	buf generate
	$(MAKE) generate-web

# What is generated for the browser: the web client's code (from proto/)
# and bundle, and the console's bundle, which the hub embeds.
WEB_GENERATED := clients/web/src/gen clients/web/dist server/console/dist

.PHONY: generate-web
generate-web: tools web-deps
	rm -rf $(WEB_GENERATED)
	cd clients/web && npm run generate && npm run build
	cd console && npm run build

.PHONY: check-generate
check-generate: tools web-deps ## Fail if gen/ and the web bundles are not what make generate makes.
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && buf generate -o "$$tmp" && \
	if ! diff -r gen/informerhub "$$tmp/gen/informerhub"; then \
		echo "gen/ is stale: run make generate and commit the result"; exit 1; fi
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && for d in $(WEB_GENERATED); do mkdir -p "$$tmp/$$d" && cp -R $$d/. "$$tmp/$$d"; done && \
	$(MAKE) -s generate-web >/dev/null && \
	for d in $(WEB_GENERATED); do if ! diff -r "$$tmp/$$d" $$d; then \
		rm -rf $$d && cp -R "$$tmp/$$d" $$d; \
		echo "$$d is stale: run make generate and commit the result"; exit 1; fi; done

.PHONY: tools
tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-connect-go $(TOOLS)/grpcurl $(TOOLS)/dockerfilelint ## Build the pinned tools.

$(TOOLS)/buf: tools/go.mod tools/go.sum
	cd tools && go build -o $@ github.com/bufbuild/buf/cmd/buf
$(TOOLS)/protoc-gen-go: tools/go.mod tools/go.sum
	cd tools && go build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go
$(TOOLS)/protoc-gen-go-grpc: tools/go.mod tools/go.sum
	cd tools && go build -o $@ google.golang.org/grpc/cmd/protoc-gen-go-grpc
$(TOOLS)/protoc-gen-connect-go: tools/go.mod tools/go.sum
	cd tools && go build -o $@ connectrpc.com/connect/cmd/protoc-gen-connect-go
$(TOOLS)/grpcurl: tools/go.mod tools/go.sum
	@echo "==> building grpcurl into .cache/tools/bin (once; about a minute)"
	cd tools && go build -o $@ github.com/fullstorydev/grpcurl/cmd/grpcurl

# BuildKit's Dockerfile linter (the checks of `docker build --check`),
# without a Docker engine.
$(TOOLS)/dockerfilelint: tools/dockerfilelint/go.mod tools/dockerfilelint/go.sum tools/dockerfilelint/main.go
	cd tools/dockerfilelint && go build -o $@ .

# kubectl of the control plane's version, for changing things while `make
# run` runs, and for the tests of deploy/ and docs/grpcurl.md.
$(TOOLS)/kubectl: tools/controlplane/go.mod tools/controlplane/go.sum
	@echo "==> building kubectl $(K8S_VERSION) into .cache/tools/bin (once; under a minute after kube-apiserver)"
	cd tools/controlplane && go build -trimpath -ldflags "-s -w $(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl

# NATS JetStream, the first sink of the export (issue 41): internal/natstest
# starts this nats-server for the tests, as a process (tools/nats pins it).
.PHONY: nats-server
nats-server: $(TOOLS)/nats-server ## Build nats-server (with JetStream) for the tests.
$(TOOLS)/nats-server: tools/nats/go.mod tools/nats/go.sum
	@echo "==> building nats-server into .cache/tools/bin (once; about a minute on 2 cores with empty Go caches)"
	cd tools/nats && go build -trimpath -ldflags "-s -w" -o $@ github.com/nats-io/nats-server/v2

# The chart's tools (test/chart runs them): Helm 3, to lint and render
# charts/informerhub; promtool, to check and unit-test its alerting rules;
# promql-metrics, Prometheus' own PromQL parser, to name the metrics the
# rules and the dashboard read. Each heavy tool is a module of its own.
.PHONY: chart-tools
chart-tools: $(TOOLS)/helm $(TOOLS)/promtool $(TOOLS)/promql-metrics ## Build helm, promtool and promql-metrics.

# With the version stamps of Helm's own release builds: its version, and
# the Kubernetes version `helm template` and `helm lint` assume by default
# (that of the client-go it is built with).
$(TOOLS)/helm: tools/helm/go.mod tools/helm/go.sum
	cd tools/helm && helm=$$(go list -m -f '{{.Version}}' helm.sh/helm/v3) && \
	minor=$$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && \
	go build -trimpath -o $@ -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$$helm \
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$minor \
		-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$minor" \
		helm.sh/helm/v3/cmd/helm
$(TOOLS)/promtool: tools/promtool/go.mod tools/promtool/go.sum
	cd tools/promtool && go build -trimpath -ldflags "-s -w" -o $@ github.com/prometheus/prometheus/cmd/promtool
$(TOOLS)/promql-metrics: tools/promtool/go.mod tools/promtool/go.sum tools/promtool/promql-metrics/main.go
	cd tools/promtool && go build -trimpath -o $@ ./promql-metrics

.PHONY: controlplane
controlplane: $(CONTROLPLANE)/kube-apiserver $(CONTROLPLANE)/etcd ## Build kube-apiserver and etcd (once; about 5 min on 2 cores with empty Go caches).

$(CONTROLPLANE)/kube-apiserver: tools/controlplane/go.mod tools/controlplane/go.sum
	@echo "==> building kube-apiserver $(K8S_VERSION) from source into .cache/ (once; about 5 min on 2 cores with empty Go caches, quiet all along)"
	cd tools/controlplane && go build -trimpath -ldflags "-s -w $(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver
$(CONTROLPLANE)/etcd: tools/controlplane/go.mod tools/controlplane/go.sum
	@echo "==> building etcd from source into .cache/ (once; under a minute after kube-apiserver)"
	cd tools/controlplane && go build -trimpath -ldflags "-s -w" -o $@ go.etcd.io/etcd/server/v3

.PHONY: clean
clean: ## Remove build output (keeps the tool and control plane caches).
	rm -rf bin

.PHONY: help
help: ## List the targets, and the variables that change them.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'
	@echo
	@echo "Variables (make VAR=value target):"
	@echo "  LISTEN=$(LISTEN)	where make run's hub serves gRPC, Connect and the console"
	@echo "  METRICS_LISTEN=$(METRICS_LISTEN)	where make run's hub serves /metrics, /healthz and /readyz"
	@echo "  BENCH_RUNS=$(BENCH_RUNS)  SOAK_COUNT=$(SOAK_COUNT)	runs of make bench and make soak"
