//! Wire and configuration types of the kubelet and kube-apiserver that `k8s-openapi` does
//! not carry. It grows with the node agent; today it is empty.
