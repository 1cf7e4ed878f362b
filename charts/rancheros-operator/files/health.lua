-- Argo CD health check of rancheros.cattle.io/ManagedOSVersionChannel: the verdicts that
-- kstatus (Flux, `kubectl wait`) computes for a channel, in Argo CD's names:
--   Progressing  kstatus InProgress: the operator has not seen this generation yet, a sync
--                is under way, or a failed sync is being retried (Reconciling True)
--   Degraded     kstatus Failed: a human must act (Stalled True: invalid spec, or failures
--                past the quick retries)
--   Suspended    kstatus Current (or InProgress when the last sync had failed): spec.suspend
--                is true, or the channel is disabled (spec.enabled false)
--   Healthy      kstatus Current: the last sync succeeded
-- Argo CD runs it with only Lua's base and table libraries: no string functions here.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function verdict(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  return verdict("Progressing", "the channel is being deleted")
end
local generation = obj.metadata and obj.metadata.generation
local observed = obj.status and obj.status.observedGeneration
if observed == nil or (generation ~= nil and observed ~= generation) then
  return verdict("Progressing", "waiting for the operator to act on generation " .. tostring(generation))
end

local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  return verdict("Progressing", reconciling.message)
end
local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  return verdict("Degraded", stalled.message)
end

local ready = condition("Ready")
if ready == nil then
  return verdict("Progressing", "waiting for the first sync")
end
if ready.reason == "Suspended" or ready.reason == "ChannelDisabled" then
  return verdict("Suspended", ready.message)
end
if ready.status == "True" then
  return verdict("Healthy", ready.message)
end
return verdict("Progressing", ready.message)
