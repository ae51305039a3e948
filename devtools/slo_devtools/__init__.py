"""slo-devtools: what develops, proves and shows slo-operator (simulator and benchmark, the
local control plane, replica models and load, the demo). Never installed in the operator image."""
