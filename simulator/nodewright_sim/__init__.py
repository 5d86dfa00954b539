"""NodeWright's local GPU-fleet simulator: a real Kubernetes control plane on loopback
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler) with kwok playing the
kubelets, and a host root directory per node where node-side commands really run."""

__version__ = "0.1.0"
