-- Argo CD health check for inference.slo-operator.io/SLOPolicy.
-- Reads only status.conditions and status.observedGeneration (written by slo-operator).
local hs = {}

local ready = nil
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end

if ready == nil then
  hs.status = "Missing"
  hs.message = "No Ready condition yet: slo-operator has not validated this policy (is it running?)"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for slo-operator to observe generation " .. tostring(generation)
  return hs
end

if ready.status == "False" then
  hs.status = "Degraded"
  hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
  return hs
end

if ready.status ~= "True" then
  hs.status = "Progressing"
  hs.message = ready.message or ""
  return hs
end

hs.status = "Healthy"
local bound = obj.status.boundCount or 0
hs.message = tostring(bound) .. " services bound"
if obj.status.attainment ~= nil then
  hs.message = hs.message .. string.format("; attainment %.4f", obj.status.attainment)
end
return hs
