"""Objects: versioned values (saved ops included), addressed by name and digest."""

from __future__ import annotations

from ..common import DateTime, Int64, WireModel
from .common import Json, SortBy


class ObjForInsert(WireModel):
    project_id: str
    object_id: str
    val: Json
    builtin_object_class: str | None = None
    set_base_object_class: str | None = None
    expected_digest: str | None = None
    wb_user_id: str | None = None


class ObjCreateReq(WireModel):
    obj: ObjForInsert


class ObjCreateRes(WireModel):
    digest: str
    object_id: str | None = None


class Obj(WireModel):
    """``ObjSchema``: one version of an object (``kind`` is ``"op"`` for saved functions)."""

    project_id: str
    object_id: str
    created_at: DateTime
    deleted_at: DateTime | None = None
    digest: str
    version_index: Int64
    is_latest: Int64
    kind: str
    base_object_class: str | None = None
    leaf_object_class: str | None = None
    val: Json = None
    wb_user_id: str | None = None
    size_bytes: Int64 | None = None
    tags: list[str] | None = None
    aliases: list[str] | None = None


class ObjReadReq(WireModel):
    project_id: str
    object_id: str
    digest: str
    metadata_only: bool = False
    include_tags_and_aliases: bool = False


class ObjReadRes(WireModel):
    obj: Obj


class ObjectVersionFilter(WireModel):
    base_object_classes: list[str] | None = None
    exclude_base_object_classes: list[str] | None = None
    leaf_object_classes: list[str] | None = None
    object_ids: list[str] | None = None
    is_op: bool | None = None
    latest_only: bool | None = None
    tags: list[str] | None = None
    aliases: list[str] | None = None


class ObjQueryReq(WireModel):
    project_id: str
    filter: ObjectVersionFilter | None = None
    limit: Int64 | None = None
    offset: Int64 | None = None
    sort_by: list[SortBy] | None = None
    metadata_only: bool = False
    include_storage_size: bool = False
    include_tags_and_aliases: bool = False


class ObjQueryRes(WireModel):
    objs: list[Obj]


class ObjDeleteReq(WireModel):
    project_id: str
    object_id: str
    digests: list[str] | None = None


class DeletedVersion(WireModel):
    digest: str
    base_object_class: str | None = None
    leaf_object_class: str | None = None


class ObjDeleteRes(WireModel):
    num_deleted: Int64
    deleted_versions: list[DeletedVersion] | None = None
