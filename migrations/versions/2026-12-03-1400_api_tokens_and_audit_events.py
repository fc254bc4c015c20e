"""api tokens (hashed at rest, with a role), the audit log, one queued forced regrade per run

Revision ID: 5b0e571043ed
Revises: 7c3f9a1e5d20
Create Date: 2026-12-03 13:05:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '5b0e571043ed'
down_revision: str | None = '7c3f9a1e5d20'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key_id', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('salt', sa.String(length=32), nullable=False),
    sa.Column('secret_sha256', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('key_id', name=op.f('uq_api_tokens_key_id')),
    sa.UniqueConstraint('name', name=op.f('uq_api_tokens_name'))
    )
    op.create_table('audit_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=True),
    sa.Column('door', sa.String(length=16), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('target', sa.String(length=255), nullable=True),
    sa.Column('outcome', sa.String(length=32), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_events'))
    )
    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_events_action'), ['action'], unique=False)
        batch_op.create_index('ix_audit_events_created_at_id', ['created_at', 'id'], unique=False)
    # One queued forced regrade per run.
    op.create_index('uq_jobs_queued_force_run_id', 'jobs', ['run_id'], unique=True,
                    postgresql_where=sa.text("state = 'queued' AND force"),
                    sqlite_where=sa.text("state = 'queued' AND force = 1"))


def downgrade() -> None:
    op.drop_index('uq_jobs_queued_force_run_id', table_name='jobs')
    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.drop_index('ix_audit_events_created_at_id')
        batch_op.drop_index(batch_op.f('ix_audit_events_action'))

    op.drop_table('audit_events')
    op.drop_table('api_tokens')
