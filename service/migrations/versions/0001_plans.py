"""The plans table (as the store created it before migrations existed: adopted if present).

Revision ID: 0001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Stores made by metadata.create_all before Alembic already hold this table: keep it
    # (and its plans) as it is.
    if sa.inspect(op.get_bind()).has_table("plans"):
        return
    op.create_table(
        "plans",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request_json", sa.Text, nullable=False),
        sa.Column("plan_json", sa.Text, nullable=False),
        sa.Column("report_json", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("plans")
