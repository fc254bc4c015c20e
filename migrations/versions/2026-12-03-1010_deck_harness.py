"""deck harness: the harness library imported with a deck (name on decks, files in deck_harness_files)

Revision ID: 5b1e0c7d2a94
Revises: 3435114b3243
Create Date: 2026-12-03 10:10:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '5b1e0c7d2a94'
down_revision: str | None = '3435114b3243'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('decks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('harness_name', sa.String(length=128), nullable=True))
    op.create_table('deck_harness_files',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('deck_id', sa.Integer(), nullable=False),
    sa.Column('path', sa.String(length=512), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['deck_id'], ['decks.id'], name=op.f('fk_deck_harness_files_deck_id_decks'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_deck_harness_files')),
    sa.UniqueConstraint('deck_id', 'path', name='uq_deck_harness_files_deck_path')
    )
    with op.batch_alter_table('deck_harness_files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_deck_harness_files_deck_id'), ['deck_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('deck_harness_files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_deck_harness_files_deck_id'))
    op.drop_table('deck_harness_files')
    with op.batch_alter_table('decks', schema=None) as batch_op:
        batch_op.drop_column('harness_name')
