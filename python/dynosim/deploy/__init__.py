"""Deployments: the candidate a planner simulated (and its mapping to and from a simulation
configuration), lowering a workload for AIConfigurator, rendering the candidate as a Kubernetes
DynamoGraphDeployment with AIC's generator, and validating manifests against the candidate."""

from dynosim.deploy.candidate import Candidate, RenderOptions, WorkerRole, load_candidate
from dynosim.deploy.lowering import LoweredWorkload, lower_workload
from dynosim.deploy.manifest import Problem, validate_manifest
from dynosim.deploy.render import MANIFEST_ARTIFACT, RenderedManifest, render_dgd

__all__ = [
    "MANIFEST_ARTIFACT",
    "Candidate",
    "LoweredWorkload",
    "Problem",
    "RenderOptions",
    "RenderedManifest",
    "WorkerRole",
    "load_candidate",
    "lower_workload",
    "render_dgd",
    "validate_manifest",
]
