"""k4w: Hyper-V Vagrant boxes and a hybrid Kubernetes cluster, driven from one cluster.yml."""
