#!/bin/bash
# Runs bin/informerhub with its default flags: only the kubeconfig, the
# listeners and --auth none (loopback) are passed on.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig|--listen|--debug-listen|--auth) args+=("$1" "$2"); shift 2;;
    --max-subscriptions-per-identity|--max-subscriptions|--rate-per-identity|--rate-burst-per-identity|--max-concurrent-streams|--kube-api-qps|--kube-api-burst|--log-level) shift 2;;
    *) args+=("$1"); shift;;
  esac
done
exec /work/main/bin/informerhub "${args[@]}"
