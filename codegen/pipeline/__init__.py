"""The pipeline skeleton: the one warp-specialised Hopper kernel every operator lowers onto.

An sProgram is read once (:class:`PipelineStructure`: roles, streams, rings, turns,
waits), planned (:class:`PipelineLayout`: shared memory, grid, staging, registers) and
written (:class:`PipelineSkeleton`) with an operator's :class:`OperatorHooks`.
"""

from codegen.pipeline.code import Code
from codegen.pipeline.hooks import GridAxis, OperatorHooks, OutputTile, StoreBox
from codegen.pipeline.layout import PipelineLayout
from codegen.pipeline.operand import OperandTile, VectorTile
from codegen.pipeline.pipelined import TripAt
from codegen.pipeline.record import EmissionRecord, EmittedIssue, EmittedRing, EmittedTurn
from codegen.pipeline.structure import Issue, PipelineStructure, Ring, Turn

__all__ = [
    "Code",
    "EmissionRecord",
    "EmittedIssue",
    "EmittedRing",
    "EmittedTurn",
    "GridAxis",
    "Issue",
    "OperandTile",
    "OperatorHooks",
    "OutputTile",
    "PipelineLayout",
    "PipelineStructure",
    "Ring",
    "StoreBox",
    "TripAt",
    "Turn",
    "VectorTile",
]
