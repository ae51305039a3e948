"""``slo-operator demo``: the operator keeping two tenants inside their SLOs on this machine.

A real local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok fake GPU
nodes), real Prometheus, the Helm chart, the operator as a process under the chart's
ServiceAccount, replica models of vLLM and a real trace replayed time-compressed.
"""
