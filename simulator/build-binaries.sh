#!/usr/bin/env bash
# Builds the simulator's control-plane binaries (and helm, which the chart tests use, and Alertmanager, which the
# alert gate's tests use) from the Go module proxy and caches them outside the work tree. A binary is rebuilt only when it is missing or its
# version changed (the version is part of the cached file name).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}
bin="$cache/bin"
mkdir -p "$bin"

k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go/kubernetes/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3" {print $2}' "$here/go/etcd/go.mod")
kwok_version=$(awk '$1=="sigs.k8s.io/kwok" {print $2}' "$here/go/kwok/go.mod")
helm_version=$(awk '$1=="helm.sh/helm/v3" {print $2}' "$here/go/helm/go.mod")
alertmanager_version=$(awk '$1=="github.com/prometheus/alertmanager" {print $2}' "$here/go/alertmanager/go.mod")
# helm's default Capabilities.KubeVersion and lint deprecation checks follow the
# client-go it is built with, as in its release builds.
helm_kube_minor=$(awk '$1=="k8s.io/client-go" {print $2}' "$here/go/helm/go.mod" | cut -d. -f2)
minor=$(echo "$k8s_version" | cut -d. -f2)

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
jobs=${NODEWRIGHT_BUILD_JOBS:-2}

go_needed=$(awk '$1=="go" {print $2; exit}' "$here/go/kubernetes/go.mod")
need_go() { # one line, before anything is built, when Go is missing or too old
  local have
  have=$(go env GOVERSION 2>/dev/null || true)
  have=${have#go}
  if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$go_needed" "$have" | sort -V | head -n 1)" != "$go_needed" ]; then
    echo "simulator/build-binaries.sh: Go >= $go_needed is needed to build the simulator's binaries once" \
      "(found: ${have:-no go on PATH}); install it from https://go.dev/dl/ and put its bin/ on PATH" >&2
    exit 1
  fi
}

build() { # name version module-dir package [ldflags [go build flag]]
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=${5:-} extra=${6:-}
  local out="$bin/$name-$version"
  if [ -x "$out" ]; then
    ln -sfn "$name-$version" "$bin/$name"
    return 0
  fi
  need_go
  echo "building $name $version (one-time; cached in $bin)" >&2
  local start=$SECONDS
  # go's own progress (a line per module downloaded) goes to a log, shown only when the build fails.
  local log="$bin/$name-$version.build.log"
  if ! (cd "$here/go/$dir" && go build -p "$jobs" -trimpath ${extra:+"$extra"} -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") \
      >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "building $name failed; the whole output is in $log" >&2
    exit 1
  fi
  rm -f "$log"
  mv "$out.tmp" "$out"
  ln -sfn "$name-$version" "$bin/$name"
  echo "built $name in $((SECONDS - start))s" >&2
}

stamp="-X k8s.io/component-base/version.gitVersion=$k8s_version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
-X k8s.io/component-base/version.gitTreeState=clean"

build etcd "$etcd_version" etcd go.etcd.io/etcd/server/v3 \
  "-X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version"
build kwok "$kwok_version" kwok sigs.k8s.io/kwok/cmd/kwok \
  "-X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}"
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build "$c" "$k8s_version" kubernetes "k8s.io/kubernetes/cmd/$c" "$stamp"
done
build helm "$helm_version" helm helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$helm_version \
-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$helm_kube_minor \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$helm_kube_minor"
# Alertmanager, whose API the alert gate's tests post alerts to. Its web UI's assets (ui/app/dist) are built by npm
# and are not in the module: it is built from a copy of the module with an empty placeholder page there (a go.mod
# replace, through -modfile), so the UI shows nothing and the API is whole.
am_modfile=""
if [ ! -x "$bin/alertmanager-$alertmanager_version" ]; then
  need_go
  am_src=$(cd "$here/go/alertmanager" && go mod download -json github.com/prometheus/alertmanager |
    awk -F'"' '$2=="Dir" {print $4}')
  am_tmp=$(mktemp -d)
  trap 'rm -rf "$am_tmp"' EXIT
  cp -r "$am_src" "$am_tmp/src" && chmod -R u+w "$am_tmp/src"
  for ui in elm mantine; do
    mkdir -p "$am_tmp/src/ui/app/dist/$ui" && echo '<!doctype html><title>Alertmanager</title>' >"$am_tmp/src/ui/app/dist/$ui/index.html"
  done
  cp "$here/go/alertmanager/go.mod" "$here/go/alertmanager/go.sum" "$am_tmp/"
  echo "replace github.com/prometheus/alertmanager => $am_tmp/src" >>"$am_tmp/go.mod"
  am_modfile="-modfile=$am_tmp/go.mod"
fi
build alertmanager "$alertmanager_version" alertmanager github.com/prometheus/alertmanager/cmd/alertmanager \
  "-X github.com/prometheus/common/version.Version=${alertmanager_version#v} \
-X github.com/prometheus/common/version.Branch=HEAD" "$am_modfile"
echo "$bin"
