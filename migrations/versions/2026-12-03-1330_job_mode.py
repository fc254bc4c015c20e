"""job mode: the regrade mode a job asks for (official | hardened | both; NULL = the default)

Revision ID: 7c3f9a1e5d20
Revises: 5b1e0c7d2a94
Create Date: 2026-12-03 13:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '7c3f9a1e5d20'
down_revision: str | None = '5b1e0c7d2a94'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('mode', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('mode')
