-- Argo CD health check for inference.slo-operator.io/InferenceService.
-- Reads only status.conditions and status.observedGeneration (written by slo-operator).
-- Reasons are those of slo_operator.api.conditions (docs/status-and-events.md).
local hs = {}

local function condition(ctype)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

-- Ready=False for these reasons needs a person (spec, policy, nodes or GPU quota);
-- other not-ready reasons (ReplicasNotReady) resolve themselves as pods start.
local needs_action = {
  InvalidSpec = true,
  PolicyNotFound = true,
  PolicyInvalid = true,
  NoMatchingNodes = true,
  UnknownGPUProduct = true,
  EngineInfeasible = true,
  InsufficientGPUs = true,
  PodsPending = true,
}

local ready = condition("Ready")
if ready == nil then
  hs.status = "Missing"
  hs.message = "No Ready condition yet: slo-operator has not reconciled this service (is it running?)"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for slo-operator to observe generation " .. tostring(generation)
  return hs
end

local message = ready.message or ""
if ready.status == "True" then
  local slo = condition("SLOCompliant")
  local limited = condition("ScalingLimited")
  if slo ~= nil and slo.status == "False" and limited ~= nil and limited.status == "True" then
    -- Missing the SLO while unable to add capacity: no reconcile will fix this alone.
    hs.status = "Degraded"
    hs.message = "SLO not met and scaling is limited (" .. (limited.reason or "") .. "): " ..
      (limited.message or "")
    return hs
  end
  hs.status = "Healthy"
  if slo ~= nil and slo.status == "False" then
    message = message .. "; SLO not met: " .. (slo.message or "")
  end
  hs.message = message
  return hs
end

if ready.status == "False" and needs_action[ready.reason] then
  hs.status = "Degraded"
  hs.message = (ready.reason or "") .. ": " .. message
  return hs
end

hs.status = "Progressing"
hs.message = message
return hs
